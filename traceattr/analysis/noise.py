"""Is a change larger than step-to-step noise? Welch's t-test on per-step values, numpy only.

Each side gives one value per step (a key's self time in that step). The per-step means are compared with
Welch's unequal-variance t-test (two-sided); p-values of many keys are corrected with Holm's step-down
method so that, over a whole table, the chance of calling any noise-only key "changed" stays below alpha.
The interval is the (1 − alpha) Welch confidence interval of (mean B − mean A), uncorrected.
Student's t distribution comes from the regularized incomplete beta function (continued fraction,
Numerical Recipes 6.4), so no scipy is needed.
"""

from __future__ import annotations

import math

import numpy as np

MIN_STEPS = 2          # a variance needs two values per side


def t_two_sided_p(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom (array-wise, df > 0)."""
    t, df = np.broadcast_arrays(np.asarray(t, dtype=float), np.asarray(df, dtype=float))
    x = df / (df + t * t)
    return np.array([_betainc(d / 2.0, 0.5, xi) for d, xi in zip(df.ravel(), x.ravel())]).reshape(t.shape)


def t_quantile(p_upper: float, df: float) -> float:
    """The t value with P(T > t) == p_upper (bisection on t_two_sided_p)."""
    low, high = 0.0, 1.0
    while _betainc(df / 2.0, 0.5, df / (df + high * high)) / 2.0 > p_upper:
        high *= 2.0
        if high > 1e12:
            return math.inf
    for _ in range(100):
        mid = (low + high) / 2.0
        if _betainc(df / 2.0, 0.5, df / (df + mid * mid)) / 2.0 > p_upper:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def welch(a: np.ndarray, b: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row: two-sided p-value of mean(b) != mean(a), and the half-width of the (1 − alpha)
    interval of mean(b) − mean(a). `a` is keys × steps of side A, `b` keys × steps of side B.
    Rows with fewer than MIN_STEPS columns on a side get p = nan, half-width = nan. Zero variance on
    both sides: p = 0 when the means differ, 1 when they are equal; half-width 0."""
    keys = a.shape[0]
    p = np.full(keys, np.nan)
    half = np.full(keys, np.nan)
    n_a, n_b = a.shape[1], b.shape[1]
    if n_a < MIN_STEPS or n_b < MIN_STEPS or keys == 0:
        return p, half
    a, b = a.astype(float), b.astype(float)
    diff = b.mean(axis=1) - a.mean(axis=1)
    var_a, var_b = a.var(axis=1, ddof=1) / n_a, b.var(axis=1, ddof=1) / n_b
    se2 = var_a + var_b
    flat = se2 <= 0
    p[flat] = np.where(diff[flat] != 0, 0.0, 1.0)
    half[flat] = 0.0
    ok = ~flat
    if ok.any():
        # Welch-Satterthwaite degrees of freedom
        df = se2[ok] ** 2 / (var_a[ok] ** 2 / (n_a - 1) + var_b[ok] ** 2 / (n_b - 1))
        se = np.sqrt(se2[ok])
        p[ok] = t_two_sided_p(diff[ok] / se, df)
        half[ok] = [t_quantile(alpha / 2.0, d) * s for d, s in zip(df.tolist(), se.tolist())]
    return p, half


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (nan stays nan): reject where adjusted <= alpha keeps the family-wise
    error rate at alpha."""
    p = np.asarray(p, dtype=float)
    tested = np.flatnonzero(~np.isnan(p))
    adjusted = np.full(len(p), np.nan)
    if len(tested) == 0:
        return adjusted
    order = tested[np.argsort(p[tested], kind="stable")]
    m = len(order)
    scaled = np.minimum(1.0, p[order] * (m - np.arange(m)))
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                          -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h
