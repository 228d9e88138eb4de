"""The engine over any compiled program: opening a model the one way (`opener`), the program
protocol every target implements (`program`), the request checks (`request`), the one
generation loop (`generate`), the text API (`engine`) and text in and out (`text`: tokenizers,
chat templates, the one text emitter), serving (`serve`) and tensor parallelism (`tp`).

The command bodies the CLI calls are in one place, `commands` (as mlc-llm keeps `cli/` over
`interface/`): `textgen` (run, generate), `chat`, `call`, `perplexity`, `bench`, `serve`,
`tokenize`, `demo`; each opens its model with `opener.open_model`. See docs/runtime.md."""
