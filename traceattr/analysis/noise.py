"""Is a change larger than step-to-step noise? t-tests on per-step values, numpy only.

Each side gives one value per step (a key's self time in that step). When both sides hold the same number of
steps, matched by position, the test is the paired t-test on the per-step differences d_i = b_i − a_i (mean,
standard error sd/√n, n − 1 degrees of freedom): an effect tied to a step's position (the first active step
is heavier in both runs) cancels in d_i instead of counting as noise. Otherwise the per-step means are
compared with Welch's unequal-variance t-test. Both are two-sided. p-values of many keys are corrected with
Holm's step-down method so that, over a whole table, the chance of calling any noise-only key "changed" stays
below alpha; holm_levels() gives the level Holm tested each key at, and the half-width of the interval at
that level is the key's noise: |mean difference| > half-width exactly when Holm rejects.
Student's t distribution comes from the regularized incomplete beta function (continued fraction,
Numerical Recipes 6.4), so no scipy is needed.
"""

from __future__ import annotations

import math

import numpy as np

MIN_STEPS = 2          # a variance needs two values per side
# ... but a difference is said to be "within step-to-step noise" only from this many steps a side: with 2 (1-2
# degrees of freedom, a 5% t critical value of 12.7 or 4.3) the test calls nearly anything noise (a 36.7 ms
# difference of trace_filter's two ranks, on 2 steps); with fewer the text says "too few steps to test"
MIN_VERDICT_STEPS = 3


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
    diff, se, df = welch_stats(a, b)
    return p_values(diff, se, df), half_widths(se, df, np.full(len(diff), float(alpha)))


def paired(a: np.ndarray, b: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """welch() for steps matched by position: the paired t-test on b[:, i] − a[:, i] (same conventions;
    zero variance of the differences: p = 0 when their mean is not 0, else 1; half-width 0)."""
    diff, se, df = paired_stats(a, b)
    return p_values(diff, se, df), half_widths(se, df, np.full(len(diff), float(alpha)))


def welch_stats(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (mean(b) − mean(a), its standard error, Welch-Satterthwaite degrees of freedom); all nan
    with fewer than MIN_STEPS columns on a side; se 0 (df nan) when both sides are constant."""
    keys = a.shape[0]
    diff, se, df = np.full(keys, np.nan), np.full(keys, np.nan), np.full(keys, np.nan)
    n_a, n_b = a.shape[1], b.shape[1]
    if n_a < MIN_STEPS or n_b < MIN_STEPS or keys == 0:
        return diff, se, df
    a, b = a.astype(float), b.astype(float)
    diff = b.mean(axis=1) - a.mean(axis=1)
    var_a, var_b = a.var(axis=1, ddof=1) / n_a, b.var(axis=1, ddof=1) / n_b
    se2 = var_a + var_b
    se = np.sqrt(se2)
    ok = se2 > 0
    df[ok] = se2[ok] ** 2 / (var_a[ok] ** 2 / (n_a - 1) + var_b[ok] ** 2 / (n_b - 1))
    return diff, se, df


def paired_stats(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (mean of d_i = b_i − a_i, its standard error sd(d)/√n, n − 1 degrees of freedom) for steps
    matched by position; all nan unless both sides hold the same number n >= MIN_STEPS of steps."""
    keys = a.shape[0]
    diff, se, df = np.full(keys, np.nan), np.full(keys, np.nan), np.full(keys, np.nan)
    n = a.shape[1]
    if n != b.shape[1] or n < MIN_STEPS or keys == 0:
        return diff, se, df
    d = b.astype(float) - a.astype(float)
    diff = d.mean(axis=1)
    se = d.std(axis=1, ddof=1) / math.sqrt(n)
    df[se > 0] = n - 1
    return diff, se, df


def p_values(diff: np.ndarray, se: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided p of diff / se under Student's t with df; se 0: p = 0 when diff != 0, else 1; nan stays."""
    p = np.full(len(diff), np.nan)
    flat = se == 0
    p[flat] = np.where(diff[flat] != 0, 0.0, 1.0)
    ok = se > 0
    if ok.any():
        p[ok] = t_two_sided_p(diff[ok] / se[ok], df[ok])
    return p


def half_widths(se: np.ndarray, df: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Half-width of the two-sided (1 − level) interval per row: t quantile × se (0 where se is 0, nan
    where se or the level is nan), so |diff| > half-width exactly when p <= level."""
    half = np.full(len(se), np.nan)
    flat = (se == 0) & ~np.isnan(levels)
    half[flat] = 0.0
    ok = (se > 0) & ~np.isnan(levels)
    half[ok] = [t_quantile(level / 2.0, d) * s for level, d, s in
                zip(levels[ok].tolist(), df[ok].tolist(), se[ok].tolist())]
    return half


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (nan stays nan): reject where adjusted <= alpha keeps the family-wise
    error rate at alpha."""
    p, order, adjusted = _ranked(p)
    m = len(order)
    scaled = np.minimum(1.0, p[order] * (m - np.arange(m)))
    adjusted[order] = np.maximum.accumulate(scaled) if m else scaled
    return adjusted


def holm_levels(p: np.ndarray, alpha: float) -> np.ndarray:
    """The level Holm tests each p-value at (nan stays nan): the i-th smallest of m (i from 0) at
    alpha / (m − i), until the first one above its level; that one and every later one at the level of the
    first (so p > level for all of them, as none is rejected). p <= level exactly when holm(p) <= alpha."""
    p, order, levels = _ranked(p)
    m = len(order)
    step = alpha / (m - np.arange(m))
    above = np.flatnonzero(p[order] > step)
    if len(above):
        step[above[0]:] = step[above[0]]
    levels[order] = step
    return levels


def _ranked(p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """p as floats, its tested (not nan) positions by ascending p, and an all-nan array to fill."""
    p = np.asarray(p, dtype=float)
    tested = np.flatnonzero(~np.isnan(p))
    return p, tested[np.argsort(p[tested], kind="stable")], np.full(len(p), np.nan)


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
