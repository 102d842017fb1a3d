"""Build-time tables of the DAS3 polynomials: the monomial table, the chunked sparse rows of the muscle
path-length polynomials and the dense blocks of the GH line-of-action fits (Chadwick et al. 2014, Appendix A; das3-model.md
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


POLY_CHUNK = 4
"""Terms per chunk: every polynomial row is cut into chunks of this many (coefficient, monomial) pairs, the
last one padded with zero coefficients, so the kernels sum fixed-length, fully unrolled chunks instead of
rows of varying length (short variable-length loops cost a mispredicted exit per row)."""


def chunk_rows(rows, width: int = POLY_CHUNK):
    """rows: list of lists of (coef, monomial) -> (row of each chunk, (n, width) coefs, (n, width) monomials).

    A row's value is the sum over its chunks; empty rows have no chunks."""
    target, coefs, monos = [], [], []
    for r, row in enumerate(rows):
        for start in range(0, len(row), width):
            part = row[start:start + width]
            target.append(r)
            coefs.append([c for c, _ in part] + [0.0] * (width - len(part)))
            monos.append([m for _, m in part] + [0] * (width - len(part)))
    return (np.asarray(target, np.int64), np.asarray(coefs, np.float64).reshape(-1, width),
            np.asarray(monos, np.int64).reshape(-1, width))


def _dense_loa_groups(rows, fit_dofs):
    """The line-of-action rows (3 k + c for fit k) as dense coefficient blocks, one per DOF set (the fits of a
    set are adjacent, so a group's rows are a range), over the monomials each group uses. A block is stored
    column-major, (monomial, row), so that the kernel adds each monomial's column to all of the group's rows:
    vectorised across rows, every row summed in the same fixed order on every CPU (a row-wise dot product
    vectorises only by reassociating its sum, whose order then follows the CPU's vector width). A group's fits
    share most of their monomials, so the blocks are mostly non-zero and cost less per term than chunked
    sparse rows (``hil bench plant`` reports the outputs phase)."""
    starts = [k for k in range(len(fit_dofs)) if k == 0 or fit_dofs[k] != fit_dofs[k - 1]] + [len(fit_dofs)]
    if len(set(fit_dofs)) != len(starts) - 1:
        raise ValueError("the line-of-action fits over the same DOFs must be adjacent")
    group_cols, group_coef, cols, coef_blocks = [0], [0], [], []
    for k0, k1 in zip(starts[:-1], starts[1:]):
        used = sorted({m for r in range(3 * k0, 3 * k1) for _, m in rows[r]})
        where = {m: j for j, m in enumerate(used)}
        block = np.zeros((len(used), 3 * (k1 - k0)))
        for i, r in enumerate(range(3 * k0, 3 * k1)):
            for coef, m in rows[r]:
                block[where[m], i] += coef
        coef_blocks.append(block.ravel())
        cols.extend(used)
        group_cols.append(len(cols))
        group_coef.append(group_coef[-1] + block.size)
    return {"loa_group_cols": np.asarray(group_cols, np.int64),
            "loa_group_rows": np.asarray([3 * k for k in starts], np.int64),
            "loa_group_coef": np.asarray(group_coef, np.int64),
            "loa_dense_mono": np.asarray(cols, np.uint32), "loa_dense_coef": np.concatenate(coef_blocks)}


def _path_rows(muscles: list, terms: list, table: MonomialTable, n_dof: int):
    """L, dL/dq (row 9 i + k for the muscle's k-th DOF) and d2L/dq_a dq_b (a <= b) of every muscle as sums of
    monomials; the Hessian rows with their muscle and their entry a * n_dof + b of an n_dof x n_dof matrix."""
    len_rows, grad_rows, hess_rows, hess_muscle, hess_entry = [], [], [], [], []
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
                    hess_entry.append(min(a, b) * n_dof + max(a, b))
    return len_rows, grad_rows, hess_rows, np.asarray(hess_muscle, np.int64), np.asarray(hess_entry, np.int64)


def polynomial_arrays(muscles: list, terms: list, loa_dofs: list, loa_rows: list, table: MonomialTable,
                      n_dof: int) -> dict:
    """The frozen monomial table and the chunked and dense arrays of the path and line-of-action polynomials."""
    mono_parent, mono_dof = table.freeze()
    len_rows, grad_rows, hess_rows, hess_muscle, hess_entry = _path_rows(muscles, terms, table, n_dof)
    len_target, len_coef, len_mono = chunk_rows(len_rows)
    grad_target, grad_coef, grad_mono = chunk_rows(grad_rows)
    hess_row, hess_coef, hess_mono = chunk_rows(hess_rows)
    loa_dense = _dense_loa_groups([[(c, table[e]) for c, e in r] for r in loa_rows], loa_dofs)
    arrays = dict(
        mono_parent=mono_parent, mono_dof=mono_dof,
        len_target=len_target, len_coef=len_coef, len_mono=len_mono,
        grad_target=grad_target, grad_coef=grad_coef, grad_mono=grad_mono,
        hess_muscle=hess_muscle[hess_row], hess_entry=hess_entry[hess_row], hess_coef=hess_coef, hess_mono=hess_mono,
        **loa_dense)
    return {key: readonly(val, np.asarray(val).dtype) for key, val in arrays.items()}
