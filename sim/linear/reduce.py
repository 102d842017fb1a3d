"""Reduced and discrete forms of a linear model x' = A x + B u, y = C x + D u, and their errors.

Residualisation (singular perturbation; Kokotovic, Khalil & O'Reilly 1986, ch. 2; Liu & Anderson 1989): with x split
into kept x1 and eliminated x2 and x2' set to 0,

    Ar = A11 - A12 A22^-1 A21,   Br = B1 - A12 A22^-1 B2,   Cr = C1 - C2 A22^-1 A21,   Dr = D - C2 A22^-1 B2,

which keeps the steady-state gain exactly (G(0) = Gr(0)) and is accurate where the eliminated dynamics are fast
next to the kept ones (the fibre states, activations of undriven muscles); slow eliminated modes (other joints)
become quasi-static. Zero-order-hold discretisation at period T: expm([[A, B], [0, 0]] T) = [[Ad, Bd], [0, I]]
(Franklin, Powell & Workman, Digital Control, §4.3). A first-order Pade delay e^(-sT) ~ (1 - sT/2) / (1 + sT/2)
(Franklin et al. §4.3.3) is realised per delayed input as z' = -(2/T) z + u_in, u = (4/T) z - u_in.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import expm


def residualize(A, B, C, D, keep) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Ar, Br, Cr, Dr) keeping the states ``keep`` (indices, in that order)."""
    keep = list(keep)
    drop = [i for i in range(A.shape[0]) if i not in set(keep)]
    A11, A12 = A[np.ix_(keep, keep)], A[np.ix_(keep, drop)]
    A21, A22 = A[np.ix_(drop, keep)], A[np.ix_(drop, drop)]
    B1, B2 = B[keep], B[drop]
    C1, C2 = C[:, keep], C[:, drop]
    X = np.linalg.solve(A22, np.hstack([A21, B2]))      # A22^-1 [A21 B2]
    nk = len(keep)
    return A11 - A12 @ X[:, :nk], B1 - A12 @ X[:, nk:], C1 - C2 @ X[:, :nk], D - C2 @ X[:, nk:]


def frequency_response(A, B, C, D, w) -> np.ndarray:
    """G(jw) = C (jw I - A)^-1 B + D for each w (rad/s): (len(w), outputs, inputs)."""
    n = A.shape[0]
    return np.array([C @ np.linalg.solve(1j * wk * np.eye(n) - A, B) + D for wk in w])


def zoh(A, B, period_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(Ad, Bd) of x[k+1] = Ad x[k] + Bd u[k] with u held over each period."""
    n, m = B.shape
    M = np.zeros((n + m, n + m))
    M[:n, :n], M[:n, n:] = A, B
    E = expm(M * period_s)
    return E[:n, :n], E[:n, n:]


def step_response(A, B, C, D, period_s: float, n_steps: int, u) -> np.ndarray:
    """y[k] (n_steps + 1, outputs) from x = 0 under the constant input u (exact at the samples: ZOH)."""
    Ad, Bd = zoh(A, B, period_s)
    u = np.asarray(u, float)
    x = np.zeros(A.shape[0])
    out = [C @ x + D @ u]
    for _ in range(n_steps):
        x = Ad @ x + Bd @ u
        out.append(C @ x + D @ u)
    return np.array(out)


def relative_error(G, Gr) -> float:
    """max over frequencies of the largest entry of |G - Gr|, relative to that of |G|."""
    return float(np.max(np.abs(G - Gr)) / np.max(np.abs(G)))


def pade_delays(A, B, C, D, delays_s) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The model with each input j with delays_s[j] > 0 delayed by a first-order Pade section (module docstring);
    the sections' states are appended after x."""
    idx = [j for j, T in enumerate(delays_s) if T > 0.0]
    n, m, k = A.shape[0], B.shape[1], len(idx)
    Aa = np.zeros((n + k, n + k))
    Ba = np.zeros((n + k, m))
    Aa[:n, :n], Ba[:n] = A, B
    for r, j in enumerate(idx):
        T = float(delays_s[j])
        Aa[:n, n + r] = (4.0 / T) * B[:, j]
        Ba[:n, j] = -B[:, j]
        Aa[n + r, n + r] = -2.0 / T
        Ba[n + r, j] = 1.0
    Ca = np.hstack([C, np.zeros((C.shape[0], k))])
    return Aa, Ba, Ca, D.copy()
