"""The KV pages of a paged program, handed to sequences as they grow, with a prefix cache.

    pages = PageAllocator(num_pages=64, page_size=16, prefix_cache=True)
    hits = pages.lookup(prompt)                 # the cached full pages of its prefix (ref-counted)
    page = pages.allocate()                     # a fresh page, or None: out of pages (preempt)
    pages.register(page, key)                   # a full page computed: shared by the hash of its tokens
    pages.release(page)                         # a sequence finished: its pages go back
    pages.cached_pages(prompt, n)               # the keys of its cached prefix, nothing held

A cached page is named by a chain hash (the parent page's key and the tokens it holds), so a hit
means the whole prefix up to and including it is the same. A page with no holder stays cached
(least recently used first out) until a fresh page is needed; `used` counts pages held by a
sequence, so it is 0 once every sequence has finished, cached or not.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

#: The key of the page before a sequence's first one.
ROOT_KEY = 0


def page_key(parent: int, tokens: Sequence[int]) -> int:
    """The chain hash of a full page holding `tokens` after the page keyed `parent`."""
    return hash((parent, tuple(int(t) for t in tokens)))


def prefix_keys(tokens: Sequence[int], page_size: int, full_pages: int) -> list[int]:
    """The keys of the first `full_pages` pages of `tokens`."""
    keys, parent = [], ROOT_KEY
    for i in range(full_pages):
        parent = page_key(parent, tokens[i * page_size:(i + 1) * page_size])
        keys.append(parent)
    return keys


class PageAllocator:
    def __init__(self, num_pages: int, page_size: int, prefix_cache: bool = True,
                 on_evict: Callable[[int], None] | None = None):
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"a paged KV cache needs at least one page of one cell, got {num_pages} of {page_size}")
        self.num_pages, self.page_size, self.prefix_cache = num_pages, page_size, prefix_cache
        self._fresh = list(range(num_pages - 1, -1, -1))  # never cached: handed out first (a stack)
        self._refs = [0] * num_pages
        self._key_of: dict[int, int] = {}       # page -> its key, for cached pages
        self._page_of: dict[int, int] = {}      # key -> page
        self._idle: OrderedDict[int, None] = OrderedDict()  # cached pages no sequence holds, oldest first
        #: Pages found in the prefix cache, over the allocator's life (for /metrics).
        self.hits = 0
        #: Told the key of each cached page evicted (what is kept beside the page goes with it).
        self.on_evict = on_evict

    @property
    def used(self) -> int:
        """Pages held by at least one sequence."""
        return self.num_pages - len(self._fresh) - len(self._idle)

    @property
    def free(self) -> int:
        """Pages a sequence could be given now (fresh ones and idle cached ones)."""
        return len(self._fresh) + len(self._idle)

    def allocate(self) -> int | None:
        """A page for one holder, or None when every page is held."""
        if self._fresh:
            page = self._fresh.pop()
        elif self._idle:
            page, _ = self._idle.popitem(last=False)  # evict the least recently used cached page
            key = self._key_of.pop(page)
            del self._page_of[key]
            if self.on_evict is not None:
                self.on_evict(key)
        else:
            return None
        self._refs[page] = 1
        return page

    def cached_pages(self, tokens: Sequence[int], max_pages: int) -> list[int]:
        """The keys of the longest prefix of `tokens` (at most `max_pages` full pages) in the
        cache, nothing held."""
        if not self.prefix_cache:
            return []
        keys = []
        for key in prefix_keys(tokens, self.page_size, max_pages):
            if key not in self._page_of:
                break
            keys.append(key)
        return keys

    def is_cached(self, key: int) -> bool:
        return key in self._page_of

    def lookup(self, tokens: Sequence[int], max_pages: int) -> list[int]:
        """The cached pages of the longest prefix of `tokens` (at most `max_pages` full pages),
        each now held once more by the caller."""
        if not self.prefix_cache:
            return []
        found = []
        for key in prefix_keys(tokens, self.page_size, max_pages):
            page = self._page_of.get(key)
            if page is None:
                break
            if self._refs[page] == 0:
                del self._idle[page]
            self._refs[page] += 1
            found.append(page)
        self.hits += len(found)
        return found

    def register(self, page: int, key: int) -> None:
        """`page` is full and computed: share it under `key` (a page already cached under that
        key keeps its place; this one stays private)."""
        if self.prefix_cache and key not in self._page_of and page not in self._key_of:
            self._page_of[key], self._key_of[page] = page, key

    def release(self, page: int) -> None:
        """One holder lets `page` go."""
        if self._refs[page] <= 0:
            raise RuntimeError(f"page {page} released more often than it was held")
        self._refs[page] -= 1
        if self._refs[page] == 0:
            if page in self._key_of:
                self._idle[page] = None
            else:
                self._fresh.append(page)
