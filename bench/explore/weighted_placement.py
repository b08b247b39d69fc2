#!/usr/bin/env python3
"""Stateless weighted placements tried for issue 28's movement target (a join or leave moves <= 1.2x the minimum),
on the issue's scenario: 100 members of capacities 1 + i % 8, 100,000 items weighing round(1e6 / rank^1.1) with the
ranks shuffled by a seed. For each placement and seed: the heaviest member's load over its ideal share (members that
hold no item larger than that share), how many members sit at 1.10x, the weight moved when a capacity-4 member joins
over its ideal share afterwards, the median and worst weight moved when a member of each capacity leaves over its
load, and the weight of other items moved when the hottest item's weight doubles, as a share of the total.

    python3 -m pip install numpy && python3 bench/explore/weighted_placement.py [seeds]

A model of the placements, not the crate's code: SplitMix64-mixed hashes and -ln(u)/c scores in floating point, as
WeightedRendezvous ranks (`current` is its greedy). Placements: `current` (heaviest first, each item to the
best-ranked member within 1.10x its share), `pure` (weighted rendezvous, no bound), `fixedC` (the greedy with limits
from a fixed total capacity, 460, as if limits did not move with the party), `quantC` (limits from the total capacity
rounded up to a power of 1.05), `fluid` (items above a tenth of a capacity unit's share by the greedy, the rest by
rendezvous weighted by each member's room), `dchoice` (the least loaded of the two best-ranked members with room).
Results of 2026-11-26 are in bench/history/weighted.md ("Stateless placements tried for the movement target").
"""
import numpy as np
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
def mix(x):
    x = (x + np.uint64(0x9E3779B97F4A7C15))
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
N = 100000
def zipf(seed):
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(N) + 1
    return np.round(1e6 / ranks.astype(float) ** 1.1).astype(np.int64)
items = np.arange(N, dtype=np.uint64)
def expo(member_id):
    # -ln(u) per item for member
    with np.errstate(over='ignore'):
        h = mix(items * np.uint64(0x100000001B3) ^ mix(np.uint64(member_id)))
    u = ((h >> np.uint64(11)).astype(np.float64) + 1.0) / 2.0**53
    return -np.log(u)
class Party:
    def __init__(self, ids, caps):
        self.ids = list(ids); self.caps = list(caps)
    def join(self, i, c): return Party(self.ids + [i], self.caps + [c])
    def leave(self, k): return Party(self.ids[:k] + self.ids[k+1:], self.caps[:k] + self.caps[k+1:])
_cache = {}
def E(mid):
    if mid not in _cache: _cache[mid] = expo(mid)
    return _cache[mid]
def scores(p):
    return np.stack([E(m) / c for m, c in zip(p.ids, p.caps)], axis=1)  # N x n
def greedy(p, w, order, limits, S=None):
    if S is None: S = scores(p)
    rank = np.argsort(S, axis=1)
    n = len(p.ids); load = np.zeros(n); owner = np.empty(N, dtype=np.int64)
    for i in order:
        wi = w[i]; r = rank[i]; placed = False
        for m in r:
            if load[m] + wi <= limits[m]:
                owner[i] = m; load[m] += wi; placed = True; break
        if not placed:
            # least full after
            m = int(np.argmin((load + wi) / limits)); owner[i] = m; load[m] += wi
    return owner
def ids_of(p, owner): return np.array(p.ids)[owner]
def heaviest(p, w, owner):
    W = w.sum(); C = sum(p.caps); n = len(p.ids)
    load = np.bincount(owner, weights=w, minlength=n); big = np.zeros(n)
    np.maximum.at(big, owner, w)
    ideal = W * np.array(p.caps) / C
    ok = big <= ideal
    return (load[ok] / ideal[ok]).max(), (load >= 0.999*1.1*ideal).sum()
def moved(pa, oa, pb, ob, w, except_=None):
    a = ids_of(pa, oa); b = ids_of(pb, ob); m = a != b
    if except_ is not None: m[except_] = False
    return w[m].sum()
def run(alg, seed=0):
    w = zipf(seed)
    base = Party(range(100), [1 + i % 8 for i in range(100)])
    W = w.sum()
    ob = alg(base, w)
    h, full = heaviest(base, w, ob)
    j = base.join(1000, 4); oj = alg(j, w)
    jm = moved(base, ob, j, oj, w) / (W * 4 / sum(j.caps))
    leaves = []
    for c in range(1, 9):
        k = base.caps.index(c); l = base.leave(k); ol = alg(l, w)
        load = w[ob == k].sum()
        leaves.append(moved(base, ob, l, ol, w) / max(load, 1))
    hot = int(np.argmax(w)); w2 = w.copy(); w2[hot] *= 2
    od = alg(base, w2); hd = moved(base, ob, base, od, w, hot) / W
    print(f"{alg.__name__} seed {seed}: heaviest {h:.3f} full {full} join {jm:.3f} leave med {np.median(leaves):.3f} max {max(leaves):.3f} doubling {hd*100:.2f}%", flush=True)

def current(p, w):
    W = w.sum(); C = sum(p.caps)
    limits = np.array([np.ceil(1.10 * W * c / C) for c in p.caps])
    order = np.lexsort((np.arange(N), -w))
    return greedy(p, w, order, limits)
def pure(p, w):
    return np.argmin(scores(p), axis=1)
def quantC(p, w, q=1.05):
    W = w.sum(); C = sum(p.caps)
    Cq = q ** np.ceil(np.log(C) / np.log(q))
    limits = np.array([np.floor(1.10 * W * c / Cq) for c in p.caps])
    order = np.lexsort((np.arange(N), -w))
    return greedy(p, w, order, limits)
def dchoice(p, w, d=2):
    W = w.sum(); C = sum(p.caps); caps = np.array(p.caps, dtype=float)
    limits = np.ceil(1.10 * W * caps / C)
    S = scores(p); rank = np.argsort(S, axis=1)
    order = np.lexsort((np.arange(N), -w))
    n = len(p.ids); load = np.zeros(n); owner = np.empty(N, dtype=np.int64)
    for i in order:
        wi = w[i]; r = rank[i]
        cand = []
        for m in r:
            if load[m] + wi <= limits[m]:
                cand.append(m)
                if len(cand) == d: break
        if not cand:
            m = int(np.argmin((load + wi) / limits))
        else:
            m = min(cand, key=lambda m: (load[m] + wi) / caps[m])
        owner[i] = m; load[m] += wi
    return owner
def fluid_gen(theta_frac=0.1, T=1.0, bound=1.10):
    def fluid(p, w):
        W = w.sum(); C = sum(p.caps); caps = np.array(p.caps, dtype=float)
        share = W * caps / C; limits = np.ceil(bound * share)
        theta = theta_frac * W / C
        order = np.lexsort((np.arange(N), -w))
        heavy = order[w[order] > theta]; light = order[w[order] <= theta]
        S = scores(p); n = len(p.ids)
        rank = np.argsort(S[heavy], axis=1)
        load = np.zeros(n); owner = np.empty(N, dtype=np.int64)
        for k, i in enumerate(heavy):
            wi = w[i]
            for m in rank[k]:
                if load[m] + wi <= limits[m]: break
            else:
                m = int(np.argmin((load + wi) / limits))
            owner[i] = m; load[m] += wi
        room = np.maximum(T * share - load, 1e-9 * share)
        ids = np.array(p.ids)
        S2 = np.stack([E(mid)[light] / room[j] for j, mid in enumerate(p.ids)], axis=1)
        rank2 = np.argsort(S2, axis=1)
        for k, i in enumerate(light):
            wi = w[i]
            for m in rank2[k]:
                if load[m] + wi <= limits[m]: break
            else:
                m = int(np.argmin((load + wi) / limits))
            owner[i] = m; load[m] += wi
        return owner
    fluid.__name__ = f"fluid(theta={theta_frac},T={T})"
    return fluid
def fixedC(p, w, Cq=460.0):
    W = w.sum()
    limits = np.array([np.floor(1.10 * W * c / Cq) for c in p.caps])
    order = np.lexsort((np.arange(N), -w))
    return greedy(p, w, order, limits)


if __name__ == "__main__":
    import sys
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for alg in [current, pure, fixedC, quantC, fluid_gen(0.1), dchoice]:
        for seed in range(seeds):
            run(alg, seed)
