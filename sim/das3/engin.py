"""Engin's directional passive resistive moments of the shoulder complex (model option
``shoulder_passive = "das3+engin"``).

Source: the graduation report "Human Joint Modelling" (the "Shoulderjoint" model built on Engin's
measurements; ``shared/papers/human-joint-modelling-engin-shoulder-sinus.txt``), cited below as
"thesis". Equations and tables are the thesis's; every choice it leaves open is marked **choice**.

Frames and angles (SI, radians; degrees only in the constants named ``*_DEG``)
--------------------------------------------------------------------------------
- Torso-fixed axes (x_fb, y_fb, z_fb), Sec. 3.3.1 / Fig. 3.6: x anterior, y lateral (right), z inferior.
  Not drawn legibly in the OCR; it follows from Table 3.2 (the shoulder's sphere centre has y > 0 and
  z = -26 cm with the origin at the level of the 10th rib, so z points down) and from App. E's reading of
  the quadrants (below). In DAS3 thorax coordinates (X lateral, Y superior, Z posterior):
  fb = (-Z, X, -Y).
- Mean joint axis system (x_jt, y_jt, z_jt), App. C eq. C.1: the torso axes turned by phi_n about z_fb,
  then by theta_n about the new y axis; rows of N = [[cos th cos ph, cos th sin ph, -sin th],
  [-sin ph, cos ph, 0], [sin th cos ph, sin th sin ph, cos th]]. (phi_n, theta_n) = (59.29, 79.08) deg, the
  sample means of Table 3.2 (App. D: the mean joint axis is the one for the subject-based mean sinus).
  The pole z_jt points antero-laterally, 11 deg below horizontal, 31 deg anterior to the frontal plane.
- Humerus direction u: from the shoulder towards the elbow (Sec. 3.3.1 step 2 digitises a point on the
  humeral axis at the epicondyles). Here: the GH-to-elbow-centre direction of the DAS3 humerus.
  Spherical angles (App. C): (x, y, z) = N u, theta = arccos z in [0, pi] (how far the arm is from the
  pole), phi = atan2(y, x) in [0, 2 pi) (phi = 0: arm raised above the pole, pi/2: backwards, pi: down,
  3 pi/2: forwards-medial). This reproduces App. E's description of Fig. E.4: stiffest in the rear
  quadrants 0 < phi < pi, softest in the lower front pi < phi < 3 pi/2 (adduction into the torso).
  **choice** Table 3.2's columns lost their headers in the OCR; the text lists them as (phi_n, theta_n).
  The other order puts the maximal flexion of the sinus at 108 deg, this one at 157 deg (Table 3.1:
  142-169 deg).

Bending part
------------
- Sinus boundary, eq. 3.1 = 4.1 (Fortran MOMENTSA): theta_s(phi) = sum_{n=1..5} cos^(n-1) phi
  (CF_(2n-1) + CF_(2n) sin phi); CF = subject-based sample means, Table D.1 (= the listing's CF(1..10)).
- Resistive moment magnitude, eq. 3.2 = 4.2 (OCR garbled; the form of eq. 3.3 in p = theta cos phi,
  q = theta sin phi confirmed by the coefficients D1..D6 of MOMENTSB):
  f = (C1 + C2 c + C3 s) theta + (C4 c^2 + C5 c s + C6 s^2) theta^2
      + (C7 c^3 + C8 c^2 s + C9 c s^2 + C10 s^3) theta^3,   c = cos phi, s = sin phi,
  in Nm (Sec. 3.3.2: a force at a moment arm normalised to 1 m), C = subject-based sample means of
  Table E.1 (= the listing's C(1..10)); reproduces the analytic column of Table H.4. Applied beyond the
  sinus only (Engin's conclusion 2, Sec. 3.3.3; MOMENTSA sets the moment to zero for theta <= theta_s)
  and extrapolated beyond the forced sinus as Engin recommends (Sec. 3.3.3 item 4). With these
  coefficients f > 0 and df/dtheta > 0 everywhere beyond the sinus up to theta = pi.
- **choice** magnitude: f itself, not the listing's linear interpolation between its 0 and 26 Nm
  contours (MOMENTSB), which the thesis's own tests (App. H.3-H.4) find off Engin's map near the sinus.
- **choice** onset: f is switched on over ONSET_RAD beyond the boundary with the C1 step
  S = 3 t^2 - 2 t^3 (t = (theta - theta_s)/ONSET_RAD), moment = f S. The thesis switches it on as a step,
  a jump of up to 11 Nm on the boundary that an implicit integrator with an exact Jacobian cannot
  follow; the region between the sinus and Engin's lowest measured contour (6 Nm) holds no data
  (Sec. 4.3, App. H.4).
- **choice** direction (the thesis: "Engin does not say anything about the direction", Sec. 3.3.2;
  the listing's direction is a placeholder, Sec. 4.3): perpendicular to the humerus (Engin discards the
  axial component, Sec. 3.3.2) and to the meridian plane through the pole, turning the arm back towards
  the pole along the great circle: M = f S (u x z_jt)/|u x z_jt|, i.e. the resistance to the
  constant-phi sweeps of increasing theta in which f was measured; it points into the sinus because
  the sinus is star-shaped about the pole (theta_s single-valued in phi). Not a gradient field: the
  work around a closed path beyond the sinus need not vanish.

Torsion part
------------
- Table: APSI (rad) -> MPSI (Nm), subroutine TORSION of the listing (App. G), from Engin's Fig. F.20
  (App. H.1: its middle curve, subject 2); piecewise-linear interpolation as in TORSION. The thesis
  applies it at every (phi, theta) (Sec. 4.2).
- psi = 0 (App. F, Fig. F.20): the upper arm along +x_fb (straight forwards) and rotated 45 deg internally;
  the neutral rotation there is the one reached by flexion in the sagittal plane from the arm hanging
  with the forearm flexing forwards (elbow flexion axis lateral).
- **choice** sign: psi > 0 internal rotation (the table spans -120..+67 deg about a 45 deg internal zero:
  75 deg external to 112 deg internal; the other sign would give 165 deg internal and 22 deg external).
  MPSI falls through zero at psi = 0.156 rad, so it is restoring only as the moment on the humerus about
  the internal-rotation axis (the proximal direction -u), which is how it is applied:
  M = MPSI(psi) (-u). The listing writes MI along +u (Sec. 4.2 gives no sign).
- **choice** psi away from the test posture (Fig. 4.2 is not legible): the twist of the humerus (its
  elbow flexion axis) about its long axis relative to the reference axis carried from the test posture
  to u by the smallest rotation (the torsion angle of MADYMO's flexion-torsion joint, Sec. 2.1.3).
  Undefined only for the arm pointing straight backwards (-x_fb), far beyond the sinus; there the
  torsion part is left out.
- **choice** beyond the table: linear extrapolation of its end segments, not the listing's constant
  +-200 Nm (a jump, "out of measurement range").

No velocity terms: the measurements are quasi-static. The option adds to the DAS3 per-DOF passive
moments (README "Engin's directional passive shoulder moments").
"""
from __future__ import annotations

import math

import numpy as np

from sim.jit.kernel import kernel

# Subject-based sample means, Table D.1 (= listing App. G, CF(1..10)): sinus boundary, eq. 3.1, rad.
SINUS_COEFFICIENTS = (1.49936, -0.09257, -0.24640, -0.29356, 0.18743, 0.58589, 0.45557, 0.00899, -0.42918, -0.47066)
# Subject-based sample means, Table E.1 (= listing App. G, C(1..10)): resistive moment, eq. 3.2, Nm.
MOMENT_COEFFICIENTS = (-21.49310, -2.03660, 2.21320, 19.60600, 5.15610, 15.78320, -1.36790, -4.13520, 0.21110,
                       -0.60590)
MEAN_JOINT_AXIS_DEG = (59.29, 79.08)      # (phi_n, theta_n), Table 3.2 sample means; App. C
# Listing App. G, subroutine TORSION (from Fig. F.20): torsion angle psi (rad) and resistive torque (Nm).
TORSION_ANGLE = (-2.094, -2.064, -1.955, -1.915, -1.866, -1.780, -1.705, -1.628, -1.490, -1.349, -1.176, -1.000,
                 -0.813, -0.651, -0.499, -0.349, -0.224, -0.140, -0.060, 0.0, 0.156, 0.279, 0.401, 0.539, 0.628,
                 0.658, 0.757, 0.791, 0.868, 0.928, 0.955, 0.993, 1.023, 1.047, 1.071, 1.094, 1.137, 1.167)
TORSION_MOMENT = (78.9, 40.0, 24.0, 19.5, 15.3, 12.9, 10.5, 9.3, 6.4, 6.0, 3.9, 3.3, 3.3, 3.3, 3.0, 2.7, 2.7, 2.7,
                  2.7, 2.7, 0.0, -2.0, -3.3, -5.4, -6.7, -8.8, -11.4, -14.7, -16.4, -20.5, -24.0, -25.4, -28.8,
                  -32.0, -34.7, -37.3, -50.0, -82.6)
TORSION_ZERO_INTERNAL_DEG = 45.0          # psi = 0 is 45 deg internal rotation, arm along +x_fb (App. F, Fig. F.20)
ONSET_RAD = math.radians(3.0)             # **choice**: width of the C1 onset beyond the sinus (module docstring)

# DAS3 thorax coordinates (X lateral, Y superior, Z posterior) of the torso axes x_fb, y_fb, z_fb (rows).
TORSO_AXES_DAS3 = ((0.0, 0.0, -1.0), (1.0, 0.0, 0.0), (0.0, -1.0, 0.0))

# Layout of the parameter vector the kernels read (ModelArrays.engin).
ON = 0           # 1.0: option on
AXES = 1         # 9: x_jt, y_jt, z_jt in DAS3 thorax coordinates
CF = 10          # 10: sinus coefficients
CM = 20          # 10: moment coefficients
ONSET = 30       # 1
U0 = 31          # 3: torsion test posture (humerus direction), thorax
A0 = 34          # 3: elbow flexion axis at psi = 0 in the test posture, thorax
E_BODY = 37      # 3: humerus direction (GH -> elbow centre) in the humerus frame
A_BODY = 40      # 3: elbow flexion axis, made perpendicular to E_BODY, humerus frame
N_TORSION = len(TORSION_ANGLE)
APSI = 43        # N_TORSION angles
MPSI = APSI + N_TORSION
N_PARAMETERS = MPSI + N_TORSION


def mean_joint_axes() -> np.ndarray:
    """Rows x_jt, y_jt, z_jt of App. C eq. C.1 at the Table 3.2 means, in DAS3 thorax coordinates."""
    ph, th = (math.radians(v) for v in MEAN_JOINT_AXIS_DEG)
    n_fb = np.array([[math.cos(th) * math.cos(ph), math.cos(th) * math.sin(ph), -math.sin(th)],
                     [-math.sin(ph), math.cos(ph), 0.0],
                     [math.sin(th) * math.cos(ph), math.sin(th) * math.sin(ph), math.cos(th)]])
    return n_fb @ np.array(TORSO_AXES_DAS3)


def torsion_reference() -> tuple[np.ndarray, np.ndarray]:
    """(u0, a0): the test posture of Fig. F.20 (arm along +x_fb) and the elbow flexion axis at psi = 0
    there: lateral after sagittal flexion, then turned 45 deg internally about the proximal axis -u0."""
    u0 = np.array(TORSO_AXES_DAS3[0])
    r = math.radians(TORSION_ZERO_INTERNAL_DEG)
    lateral = np.array(TORSO_AXES_DAS3[1])
    up = -np.array(TORSO_AXES_DAS3[2])
    return u0, math.cos(r) * lateral + math.sin(r) * up


def engin_parameters(enabled: bool, elbow_location, elbow_axis) -> np.ndarray:
    """The read-only parameter vector of the kernels; ``elbow_location`` and ``elbow_axis`` are the
    DAS3 elbow joint centre and flexion axis in the humerus frame."""
    p = np.zeros(N_PARAMETERS)
    p[ON] = 1.0 if enabled else 0.0
    p[AXES:AXES + 9] = mean_joint_axes().ravel()
    p[CF:CF + 10] = SINUS_COEFFICIENTS
    p[CM:CM + 10] = MOMENT_COEFFICIENTS
    p[ONSET] = ONSET_RAD
    p[U0:U0 + 3], p[A0:A0 + 3] = torsion_reference()
    e = np.asarray(elbow_location, np.float64) / np.linalg.norm(elbow_location)
    a = np.asarray(elbow_axis, np.float64) - np.dot(elbow_axis, e) * e
    p[E_BODY:E_BODY + 3] = e
    p[A_BODY:A_BODY + 3] = a / np.linalg.norm(a)
    p[APSI:MPSI] = TORSION_ANGLE
    p[MPSI:] = TORSION_MOMENT
    p.setflags(write=False)
    return p


@kernel
def sinus_boundary(E, c, s):
    """(theta_s, d theta_s / d phi) of eq. 3.1 at cos phi = c, sin phi = s."""
    th, dth, cn, dcn = 0.0, 0.0, 1.0, 0.0
    for n in range(5):
        lo, hi = E[CF + 2 * n], E[CF + 2 * n + 1]
        th += cn * (lo + hi * s)
        dth += dcn * (lo + hi * s) + cn * hi * c
        dcn = -(n + 1) * cn * s
        cn *= c
    return th, dth


@kernel
def resistive_moment(E, c, s, theta):
    """(f, df/dphi, df/dtheta) of eq. 3.2, Nm."""
    k = E[CM:CM + 10]
    k1 = k[0] + k[1] * c + k[2] * s
    k2 = k[3] * c * c + k[4] * c * s + k[5] * s * s
    k3 = k[6] * c * c * c + k[7] * c * c * s + k[8] * c * s * s + k[9] * s * s * s
    k1p = -k[1] * s + k[2] * c
    k2p = -2.0 * k[3] * c * s + k[4] * (c * c - s * s) + 2.0 * k[5] * s * c
    k3p = (-3.0 * k[6] * c * c * s + k[7] * (c * c * c - 2.0 * c * s * s) + k[8] * (2.0 * c * c * s - s * s * s)
           + 3.0 * k[9] * s * s * c)
    t2 = theta * theta
    return (k1 * theta + k2 * t2 + k3 * t2 * theta, k1p * theta + k2p * t2 + k3p * t2 * theta,
            k1 + 2.0 * k2 * theta + 3.0 * k3 * t2)


@kernel
def onset(E, depth):
    """(S, dS/d depth): the C1 step 3 t^2 - 2 t^3, t = depth / ONSET, 0 inside the sinus."""
    if depth <= 0.0:
        return 0.0, 0.0
    t = depth / E[ONSET]
    if t >= 1.0:
        return 1.0, 0.0
    return t * t * (3.0 - 2.0 * t), 6.0 * t * (1.0 - t) / E[ONSET]


@kernel
def torsion_table(E, psi):
    """(MPSI(psi), slope), piecewise linear in the table, its end segments extended."""
    j = 0
    while j < N_TORSION - 2 and psi > E[APSI + j + 1]:
        j += 1
    slope = (E[MPSI + j + 1] - E[MPSI + j]) / (E[APSI + j + 1] - E[APSI + j])
    return E[MPSI + j] + slope * (psi - E[APSI + j]), slope


@kernel
def bending_moment(E, u, J):
    """Add the bending moment f S (u x z)/|u x z| and its derivative w.r.t. u to J (see engin_moment)."""
    X, Y, Z = E[AXES:AXES + 3], E[AXES + 3:AXES + 6], E[AXES + 6:AXES + 9]
    x = X[0] * u[0] + X[1] * u[1] + X[2] * u[2]
    y = Y[0] * u[0] + Y[1] * u[1] + Y[2] * u[2]
    w = Z[0] * u[0] + Z[1] * u[1] + Z[2] * u[2]
    rho = math.sqrt(x * x + y * y)
    if rho < 1e-9:
        return
    theta = math.atan2(rho, w)
    c, s = x / rho, y / rho
    th_s, dth_s = sinus_boundary(E, c, s)
    S, dS = onset(E, theta - th_s)
    if S == 0.0:
        return
    f, f_phi, f_theta = resistive_moment(E, c, s, theta)
    m = f * S
    m_theta = f_theta * S + f * dS
    m_phi = f_phi * S - f * dS * dth_s
    r2 = rho * rho + w * w
    v = (u[1] * Z[2] - u[2] * Z[1], u[2] * Z[0] - u[0] * Z[2], u[0] * Z[1] - u[1] * Z[0])   # u x z
    for j in range(3):
        drho = (x * X[j] + y * Y[j]) / rho
        dm = m_theta * (w * drho - rho * Z[j]) / r2 + m_phi * (x * Y[j] - y * X[j]) / (rho * rho)
        # d(u x z)/du_j = e_j x z
        ez = (0.0 if j == 0 else (Z[2] if j == 1 else -Z[1]),
              (-Z[2] if j == 0 else (0.0 if j == 1 else Z[0])),
              (Z[1] if j == 0 else (-Z[0] if j == 1 else 0.0)))
        for i in range(3):
            J[i, 1 + j] += v[i] / rho * dm + m * (ez[i] / rho - v[i] * drho / (rho * rho))
    for i in range(3):
        J[i, 0] += m * v[i] / rho


@kernel
def _cross(a, b, i):
    """Component i of a x b (a, b indexable by 0..2)."""
    if i == 0:
        return a[1] * b[2] - a[2] * b[1]
    if i == 1:
        return a[2] * b[0] - a[0] * b[2]
    return a[0] * b[1] - a[1] * b[0]


@kernel
def _carried_axis(E, u):
    """(ar, k, k . a0, 1 + u0 . u): the psi = 0 axis a0 carried from u0 to u by the smallest rotation
    (Rodrigues about k = u0 x u); 1 + u0 . u <= 0 only for u = -u0."""
    u0, a0 = E[U0:U0 + 3], E[A0:A0 + 3]
    c0 = u0[0] * u[0] + u0[1] * u[1] + u0[2] * u[2]
    den = 1.0 + c0
    k = (_cross(u0, u, 0), _cross(u0, u, 1), _cross(u0, u, 2))
    ka = k[0] * a0[0] + k[1] * a0[1] + k[2] * a0[2]
    if den < 1e-6:
        return (0.0, 0.0, 0.0), k, ka, den
    ar = (a0[0] * c0 + _cross(k, a0, 0) + k[0] * ka / den, a0[1] * c0 + _cross(k, a0, 1) + k[1] * ka / den,
          a0[2] * c0 + _cross(k, a0, 2) + k[2] * ka / den)
    return ar, k, ka, den


@kernel
def torsion_angle(E, u, a):
    """psi, rad (internal rotation > 0): the angle from the carried axis to a about the proximal axis -u."""
    ar = _carried_axis(E, u)[0]
    sn = -(u[0] * _cross(ar, a, 0) + u[1] * _cross(ar, a, 1) + u[2] * _cross(ar, a, 2))
    return math.atan2(sn, ar[0] * a[0] + ar[1] * a[1] + ar[2] * a[2])


@kernel
def torsion_moment(E, u, a, J):
    """Add the torsion moment MPSI(psi) (-u) and its derivatives w.r.t. u and a to J (see engin_moment)."""
    u0, a0 = E[U0:U0 + 3], E[A0:A0 + 3]
    ar, k, ka, den = _carried_axis(E, u)
    if den < 1e-6:
        return
    ra = (_cross(ar, a, 0), _cross(ar, a, 1), _cross(ar, a, 2))
    sn = -(u[0] * ra[0] + u[1] * ra[1] + u[2] * ra[2])          # (-u) . (ar x a)
    cs = ar[0] * a[0] + ar[1] * a[1] + ar[2] * a[2]
    mt, slope = torsion_table(E, math.atan2(sn, cs))
    inv = 1.0 / (sn * sn + cs * cs)
    for j in range(3):
        ej = (1.0 if j == 0 else 0.0, 1.0 if j == 1 else 0.0, 1.0 if j == 2 else 0.0)
        dk = (_cross(u0, ej, 0), _cross(u0, ej, 1), _cross(u0, ej, 2))
        dka = dk[0] * a0[0] + dk[1] * a0[1] + dk[2] * a0[2]
        dc = u0[j]
        dar = (a0[0] * dc + _cross(dk, a0, 0) + (dk[0] * ka + k[0] * dka) / den - k[0] * ka * dc / (den * den),
               a0[1] * dc + _cross(dk, a0, 1) + (dk[1] * ka + k[1] * dka) / den - k[1] * ka * dc / (den * den),
               a0[2] * dc + _cross(dk, a0, 2) + (dk[2] * ka + k[2] * dka) / den - k[2] * ka * dc / (den * den))
        dsn_u = -ra[j] - (u[0] * _cross(dar, a, 0) + u[1] * _cross(dar, a, 1) + u[2] * _cross(dar, a, 2))
        dcs_u = dar[0] * a[0] + dar[1] * a[1] + dar[2] * a[2]
        dsn_a = -(u[0] * _cross(ar, ej, 0) + u[1] * _cross(ar, ej, 1) + u[2] * _cross(ar, ej, 2))
        dpsi_u = (cs * dsn_u - sn * dcs_u) * inv
        dpsi_a = (cs * dsn_a - sn * ar[j]) * inv
        for i in range(3):
            J[i, 1 + j] -= slope * dpsi_u * u[i] + (mt if i == j else 0.0)
            J[i, 4 + j] -= slope * dpsi_a * u[i]
    for i in range(3):
        J[i, 0] -= mt * u[i]


@kernel
def engin_moment(E, u, a, J):
    """Engin's passive moment on the humerus (reaction on the thorax), thorax frame, Nm, for the humerus
    direction u and elbow flexion axis a (unit, perpendicular; thorax frame). J (3, 7) <- [M | dM/du |
    dM/da]."""
    J[:, :] = 0.0
    bending_moment(E, u, J)
    torsion_moment(E, u, a, J)


@kernel
def engin_torque(E, R, n, dirs, J, T):
    """T (3, ND) <- Engin's moment as a dual vector (first n slots) for the humerus orientation R (3, 3,
    ND, dual). dirs (2, 3) and J (3, 7) are scratch; afterwards dirs holds u, a and J[:, 0] the moment."""
    e, ab = E[E_BODY:E_BODY + 3], E[A_BODY:A_BODY + 3]
    for i in range(3):
        dirs[0, i] = R[i, 0, 0] * e[0] + R[i, 1, 0] * e[1] + R[i, 2, 0] * e[2]
        dirs[1, i] = R[i, 0, 0] * ab[0] + R[i, 1, 0] * ab[1] + R[i, 2, 0] * ab[2]
    engin_moment(E, dirs[0], dirs[1], J)
    for i in range(3):
        T[i, 0] = J[i, 0]
    for k in range(1, n):
        du0 = R[0, 0, k] * e[0] + R[0, 1, k] * e[1] + R[0, 2, k] * e[2]
        du1 = R[1, 0, k] * e[0] + R[1, 1, k] * e[1] + R[1, 2, k] * e[2]
        du2 = R[2, 0, k] * e[0] + R[2, 1, k] * e[1] + R[2, 2, k] * e[2]
        da0 = R[0, 0, k] * ab[0] + R[0, 1, k] * ab[1] + R[0, 2, k] * ab[2]
        da1 = R[1, 0, k] * ab[0] + R[1, 1, k] * ab[1] + R[1, 2, k] * ab[2]
        da2 = R[2, 0, k] * ab[0] + R[2, 1, k] * ab[1] + R[2, 2, k] * ab[2]
        for i in range(3):
            T[i, k] = (J[i, 1] * du0 + J[i, 2] * du1 + J[i, 3] * du2
                       + J[i, 4] * da0 + J[i, 5] * da1 + J[i, 6] * da2)


@kernel
def spherical_angles(E, u):
    """(phi, theta) of the humerus direction u in the mean joint axis system (App. C), rad."""
    X, Y, Z = E[AXES:AXES + 3], E[AXES + 3:AXES + 6], E[AXES + 6:AXES + 9]
    x = X[0] * u[0] + X[1] * u[1] + X[2] * u[2]
    y = Y[0] * u[0] + Y[1] * u[1] + Y[2] * u[2]
    w = Z[0] * u[0] + Z[1] * u[1] + Z[2] * u[2]
    phi = math.atan2(y, x)
    if phi < 0.0:
        phi += 2.0 * math.pi
    return phi, math.atan2(math.sqrt(x * x + y * y), w)
