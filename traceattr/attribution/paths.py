"""PathTrie: interned paths (op stacks, module paths, annotation paths) built level by level.

A path is a code: 0 is the empty path (the root); every other code has a parent code and a last name.
Paths are interned per unique (parent code, name code) pair, never per event, so building the paths of
a million host events costs one `np.unique` per tree level plus a dict lookup per distinct path.
"""

from __future__ import annotations

import numpy as np

ROOT = 0


class PathTrie:
    """Codes for paths of names; `names` are the display strings that name codes index."""

    def __init__(self, names: list[str], separator: str) -> None:
        self.names = names               # name code -> display name
        self.separator = separator
        self._parent = [ROOT]            # code -> parent code (the root is its own parent)
        self._name = [-1]                # code -> name code
        self._depth = [0]
        self._index: dict[int, int] = {}  # parent code * len(names) + name code -> code
        self._strings: dict[int, str] = {ROOT: ""}

    def __len__(self) -> int:
        return len(self._parent)

    def extend(self, parent_codes: np.ndarray, name_codes: np.ndarray) -> np.ndarray:
        """Codes of the paths parent + name, vectorized over unique pairs."""
        if len(parent_codes) == 0:
            return np.zeros(0, dtype=np.int64)
        width = max(len(self.names), 1)
        keys = parent_codes.astype(np.int64) * width + name_codes.astype(np.int64)
        unique_keys, inverse = np.unique(keys, return_inverse=True)
        codes = np.empty(len(unique_keys), dtype=np.int64)
        for i, key in enumerate(unique_keys.tolist()):
            code = self._index.get(key)
            if code is None:
                parent, name = divmod(key, width)
                code = len(self._parent)
                self._index[key] = code
                self._parent.append(parent)
                self._name.append(name)
                self._depth.append(self._depth[parent] + 1)
            codes[i] = code
        return codes[inverse.reshape(-1)]

    @property
    def parent(self) -> np.ndarray:
        return np.asarray(self._parent, dtype=np.int64)

    @property
    def depth(self) -> np.ndarray:
        return np.asarray(self._depth, dtype=np.int64)

    def name(self, code: int) -> str:
        return self.names[self._name[code]] if code != ROOT else ""

    def string(self, code: int) -> str:
        """The full path, names joined by the separator (memoized per code)."""
        chain = []                       # iterative: deep stacks must not hit the recursion limit
        while code not in self._strings:
            chain.append(code)
            code = self._parent[code]
        text = self._strings[code]
        for link in reversed(chain):
            text = self.name(link) if not text else text + self.separator + self.name(link)
            self._strings[link] = text
        return text

    def strings(self, codes) -> list[str]:
        return [self.string(int(code)) for code in codes]
