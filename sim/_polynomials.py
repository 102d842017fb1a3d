"""Build-time tables of the DAS3 polynomials: the monomial table and the sparse (CSR) and dense arrays of the
muscle path-length polynomials and the GH line-of-action fits (Chadwick et al. 2014, Appendix A; das3-model.md
"Muscle paths"), laid out so the numba kernels evaluate each monomial once a step."""
from __future__ import annotations

import numpy as np


def readonly(a, dtype=np.float64) -> np.ndarray:
    arr = np.ascontiguousarray(np.array(a, dtype=dtype))
    arr.setflags(write=False)
    return arr


class MonomialTable:
    """Every monomial used by the path and line-of-action polynomials and their derivatives, closed under
    lowering any exponent, so each is one multiplication away from a lower one (evaluated once a step)."""

    def __init__(self) -> None:
        self._index: dict[tuple[int, ...], int] = {}

    def add(self, exps: tuple[int, ...]) -> None:
        if exps in self._index:
            return
        self._index[exps] = -1
        for j, e in enumerate(exps):
            if e:
                self.add(exps[:j] + (e - 1,) + exps[j + 1:])

    def freeze(self):
        order = sorted(self._index, key=lambda e: (sum(e), e))
        self._index = {e: i for i, e in enumerate(order)}
        parent = np.zeros(len(order), np.int64)
        dof = np.zeros(len(order), np.int64)
        for i, e in enumerate(order):
            if sum(e):
                j = next(k for k, v in enumerate(e) if v)
                parent[i] = self._index[e[:j] + (e[j] - 1,) + e[j + 1:]]
                dof[i] = j
        return parent, dof

    def __getitem__(self, exps: tuple[int, ...]) -> int:
        return self._index[exps]


def full_exponents(row, dofs, n_dof: int) -> tuple[int, ...]:
    """The exponent of every model DOF from a fit's exponent row over its own DOFs."""
    e = [0] * n_dof
    for local, v in enumerate(row):
        e[dofs[local]] += int(v)
    return tuple(e)


def _lowered(e: tuple[int, ...], *dofs: int) -> tuple[int, ...]:
    out = list(e)
    for d in dofs:
        out[d] -= 1
    return tuple(out)


def _csr(rows):
    """rows: list of lists of (coef, key) -> (row starts, coefs, keys)."""
    starts = np.zeros(len(rows) + 1, np.int64)
    starts[1:] = np.cumsum([len(r) for r in rows])
    coefs = np.array([c for r in rows for c, _ in r], np.float64)
    keys = [k for r in rows for _, k in r]
    return starts, coefs, keys


DENSE_LOA_MIN_DOFS = 6


def _dense_loa_groups(rows, fit_dofs):
    """Split the line-of-action rows: fits over >= 6 DOFs (thorax- and clavicle-origin muscles, ~85 %
    of all terms) become dense coefficient blocks, one per DOF set, over the monomials the group uses,
    so they are evaluated as contiguous dot products; the others stay sparse (their CSR rows empty
    here when dense)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for k, dofs in enumerate(fit_dofs):
        if len(dofs) >= DENSE_LOA_MIN_DOFS:
            groups.setdefault(dofs, []).append(k)
    n_rows = len(rows)
    dense_off = -np.ones(n_rows, np.int64)
    dense_group = -np.ones(n_rows, np.int64)
    group_cols, cols, coef_blocks = [0], [], []
    offset = 0
    sparse_rows = [list(r) for r in rows]
    for g, fits in enumerate(groups.values()):
        group_rows = [3 * k + c for k in fits for c in range(3)]
        used = sorted({m for r in group_rows for _, m in rows[r]})
        where = {m: j for j, m in enumerate(used)}
        block = np.zeros((len(group_rows), len(used)))
        for i, r in enumerate(group_rows):
            for coef, m in rows[r]:
                block[i, where[m]] += coef
            dense_off[r] = offset + i * len(used)
            dense_group[r] = g
            sparse_rows[r] = []
        offset += block.size
        coef_blocks.append(block.ravel())
        cols.extend(used)
        group_cols.append(len(cols))
    return {"loa_dense_off": dense_off, "loa_dense_group": dense_group,
            "loa_group_cols": np.asarray(group_cols, np.int64),
            "loa_dense_mono": np.asarray(cols, np.uint32),
            "loa_dense_coef": np.concatenate(coef_blocks) if coef_blocks else np.zeros(0),
            "sparse_rows": sparse_rows}


def _path_rows(muscles: list, terms: list, table: MonomialTable):
    """L, dL/dq (local order) and d2L/dq2 (a <= b) of every muscle as sparse sums of monomials."""
    len_rows, grad_rows, hess_rows, hess_muscle, hess_dofs = [], [], [], [], []
    for i in range(len(terms)):
        dofs = list(muscles[i]["dof_indices"])
        len_rows.append([(c, table[e]) for c, e in terms[i]])
        for k in range(9):      # the rows of DOFs the muscle does not cross stay empty
            a = dofs[k] if k < len(dofs) else None
            grad_rows.append([] if a is None else [(c * e[a], table[_lowered(e, a)]) for c, e in terms[i] if e[a]])
        for ka, a in enumerate(dofs):
            for b in dofs[ka:]:
                if a == b:
                    row = [(c * e[a] * (e[a] - 1), table[_lowered(e, a, a)]) for c, e in terms[i] if e[a] >= 2]
                else:
                    row = [(c * e[a] * e[b], table[_lowered(e, a, b)]) for c, e in terms[i] if e[a] and e[b]]
                if row:
                    hess_rows.append(row)
                    hess_muscle.append(i)
                    hess_dofs.append((a, b))
    return len_rows, grad_rows, hess_rows, hess_muscle, hess_dofs


def polynomial_arrays(muscles: list, terms: list, loa: dict, loa_rows: list, table: MonomialTable) -> dict:
    """The frozen monomial table and the CSR and dense arrays of the path and line-of-action polynomials."""
    mono_parent, mono_dof = table.freeze()
    len_rows, grad_rows, hess_rows, hess_muscle, hess_dofs = _path_rows(muscles, terms, table)
    len_row, len_coef, len_mono = _csr(len_rows)
    grad_row, grad_coef, grad_mono = _csr(grad_rows)
    hess_row, hess_coef, hess_mono = _csr(hess_rows)
    loa_dense = _dense_loa_groups([[(c, table[e]) for c, e in r] for r in loa_rows],
                                  [tuple(f["dof_indices"]) for f in loa["muscles"]])
    loa_row, loa_coef, loa_mono = _csr(loa_dense.pop("sparse_rows"))
    return dict(
        mono_parent=readonly(mono_parent, np.int64), mono_dof=readonly(mono_dof, np.int64),
        len_row=readonly(len_row, np.int64), len_coef=readonly(len_coef), len_mono=readonly(len_mono, np.int64),
        grad_row=readonly(grad_row, np.int64), grad_coef=readonly(grad_coef), grad_mono=readonly(grad_mono, np.int64),
        hess_muscle=readonly(hess_muscle, np.int64), hess_dofs=readonly(np.array(hess_dofs).reshape(-1, 2), np.int64),
        hess_row=readonly(hess_row, np.int64), hess_coef=readonly(hess_coef), hess_mono=readonly(hess_mono, np.int64),
        loa_row=readonly(loa_row, np.int64), loa_coef=readonly(loa_coef), loa_mono=readonly(loa_mono, np.uint32),
        **{key: readonly(val, val.dtype) for key, val in loa_dense.items()})


