"""Student's t in closed form for integer df: a reference that the package's numerical t
(analysis/statistics.py) is checked against."""

import math


def t_coverage(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer df (closed form, Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2 == 1:
        if df == 1:
            return 2 * theta / math.pi
        term = total = math.cos(theta)
        for k in range(3, df - 1, 2):
            term *= (k - 1) / k * cos2
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * total)
    term = total = 1.0
    for k in range(2, df - 1, 2):
        term *= (k - 1) / k * cos2
        total += term
    return math.sin(theta) * total
