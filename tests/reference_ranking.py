"""Independent float64 NumPy references (explicit loops) for the papers' ranking losses."""

import math

import numpy as np


def cdist(x, metric):
    x = np.asarray(x, np.float64)
    n = len(x)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            diff = x[i] - x[j]
            if metric == "euclidean":
                out[i, j] = math.sqrt(diff @ diff + 1e-12)
            elif metric == "sqeuclidean":
                out[i, j] = diff @ diff
            elif metric == "cityblock":
                out[i, j] = np.abs(diff).sum()
            else:
                out[i, j] = 1.0 - x[i] @ x[j]
    return out


def batch_hard(labels, x, margin, metric):
    d = cdist(x, metric)
    out = []
    for a in range(len(x)):
        pos = [d[a, p] for p in range(len(x)) if p != a and labels[p] == labels[a]]
        neg = [d[a, n] for n in range(len(x)) if labels[n] != labels[a]]
        if not neg:
            out.append(0.0)
            continue
        diff = (max(pos) if pos else 0.0) - min(neg)
        if margin == "soft":
            out.append(math.log1p(math.exp(diff)))
        elif margin == "none":
            out.append(diff)
        else:
            out.append(max(diff + margin, 0.0))
    return np.array(out)


def pk_contrastive(labels, x, margin):
    x = np.asarray(x, np.float64)
    out = []
    for g in range(0, len(x), 8):
        a0, a1, a2, a3, b0, b1, b2, b3 = range(g, g + 8)
        for i, j in ((a0, a1), (b0, a3), (a2, b1), (b2, b3)):
            d = math.sqrt(((x[i] - x[j]) ** 2).sum() + 1e-5)
            y = float(labels[i] == labels[j])
            out.append(y * d * d + (1 - y) * max(margin - d, 0.0) ** 2)
    return np.array(out)


def _xent_rows(logits, anchor_labels):
    out = []
    for i in range(len(logits)):
        target = np.array([float(anchor_labels[j] == anchor_labels[i]) for j in range(len(logits))])
        target /= target.sum()
        z = logits[i] - logits[i].max()
        log_softmax = z - math.log(np.exp(z).sum())
        out.append(-(target * log_softmax).sum())
    return np.array(out)


def _l2(a, p, l2_reg):
    return 0.25 * l2_reg * ((a**2).sum(1).mean() + (p**2).sum(1).mean())


def pk_npair(labels, x, l2_reg):
    x = np.asarray(x, np.float64)
    a, p = x[0::2], x[1::2]
    return _xent_rows(a @ p.T, labels[0::2]) + _l2(a, p, l2_reg)


def pk_angular(labels, x, alpha, l2_reg):
    x = np.asarray(x, np.float64)
    a, p = x[0::2], x[1::2]
    t = math.tan(math.radians(alpha)) ** 2
    n = len(a)
    logits = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            logits[i, j] = 2 * (1 + t) * a[i] @ p[i] if i == j else 4 * t * (a[i] + p[i]) @ p[j]
    return _xent_rows(logits, labels[0::2]) + _l2(a, p, l2_reg)


def spread_out(x, negatives):
    x = np.asarray(x, np.float64)
    s = [x[i] @ x[n] for i, n in enumerate(negatives) if n >= 0]
    if not s:
        return 0.0
    s = np.array(s)
    return s.mean() ** 2 + max(0.0, (s**2).mean() - 1.0 / x.shape[1])


def center(x, labels, centers, alpha, lambda_):
    """(value, centers after one update), per-sample loops."""
    x, centers = np.asarray(x, np.float64), np.asarray(centers, np.float64)
    value = lambda_ * 0.5 * sum(((x[i] - centers[y]) ** 2).sum() for i, y in enumerate(labels))
    new = centers.copy()
    for j in set(labels.tolist()):
        members = [i for i, y in enumerate(labels) if y == j]
        new[j] -= alpha * sum(centers[j] - x[i] for i in members) / (1 + len(members))
    return value, new


def proxy_anchor(labels, s, alpha, delta):
    s = np.asarray(s, np.float64)
    classes = s.shape[1]
    pos_terms, neg_terms = [], []
    for c in range(classes):
        pos = [math.exp(-alpha * (s[i, c] - delta)) for i in range(len(s)) if labels[i] == c]
        neg = [math.exp(alpha * (s[i, c] + delta)) for i in range(len(s)) if labels[i] != c]
        if pos:
            pos_terms.append(math.log(1 + sum(pos)))
        neg_terms.append(math.log(1 + sum(neg)))
    return sum(pos_terms) / len(pos_terms) + sum(neg_terms) / classes
