"""The local search of the general scheduler: a plan's waits kept so every move is priced at once.

See general.py for the model.  ``Search`` holds, per iteration, its jobs (runs of
synced units) in release order with prefix/suffix maxima of their drain terms,
so one numpy expression prices moving any job to any iteration, splitting or
merging collectives, attaching a job to another iteration's, shifting a run
boundary, or (once) swapping two jobs; applying a move rebuilds only the two
iterations it touches.
"""

from __future__ import annotations

from functools import reduce

import numpy as np

NEG_INF = -np.inf
Plan = list[list[tuple[int, int]]]  # per iteration, its collectives as (first, last) synced-unit indices


def _max(*terms: np.ndarray) -> np.ndarray:
    """Elementwise maximum of broadcastable arrays."""
    return reduce(np.maximum, terms)


class Search:
    """Incremental state: assignment, jobs, and per-iteration prefix/suffix maxima."""

    def __init__(self, r: np.ndarray, c: np.ndarray, end: float, H: int, alpha: float, plan: Plan):
        self.r, self.c, self.end, self.H, self.alpha = r, c, end, H, alpha
        M = self.M = len(r)
        self.csum = np.concatenate(([0.0], np.cumsum(c)))
        self.pos = np.arange(M)
        self.tol = 1e-12 * (end + float(c.sum()) + alpha * M + 1.0)
        self.x = np.zeros(M, dtype=int)  # iteration of each synced unit
        self.is_end = np.zeros(M, dtype=bool)  # unit closes its job (collective)
        for g, jobs in enumerate(plan):
            for first, last in jobs:
                self.x[first : last + 1] = g
                self.is_end[last] = True
        self._bounds()
        self.T = np.zeros((H, M))  # T[g, q]: length of g's jobs at positions >= q
        self.V = np.full((H, M), NEG_INF)  # drain term of g's job ending at q
        self.PP = np.full((H, M), NEG_INF)  # max V[g, :q]
        self.SN = np.full((H, M), NEG_INF)  # max V[g, q+1:]
        self.TN = np.zeros((H, M))  # T[g, q+1]
        self.W = np.zeros(H)
        self.D: np.ndarray | None = None  # D[u, v]: change of x[u]'s wait if job u leaves and job v joins
        self.stale = np.ones(H, dtype=bool)  # iterations whose rows of D are out of date
        for g in range(H):
            self._refresh(g)

    # ---- state upkeep -------------------------------------------------
    def _jobs_changed(self) -> None:
        """Job bounds and lengths after is_end changed; every row of D is stale (lengths moved)."""
        self._bounds()
        self.stale = np.ones(self.H, dtype=bool)

    def _bounds(self) -> None:
        ends = np.where(self.is_end, self.pos, self.M)
        self.job_end = np.minimum.accumulate(ends[::-1])[::-1]
        starts = np.where(self.is_end, self.pos, -1)
        self.job_start = np.concatenate(([0], np.maximum.accumulate(starts)[:-1] + 1))
        self.p = self.alpha + self.csum[self.job_end + 1] - self.csum[self.job_start]  # valid at ends

    def _refresh(self, g: int) -> None:
        mine = (self.x == g) & self.is_end
        length = np.where(mine, self.p, 0.0)
        T = np.cumsum(length[::-1])[::-1]
        V = np.where(mine, self.r + T, NEG_INF)
        pre = np.maximum.accumulate(V)
        suf = np.maximum.accumulate(V[::-1])[::-1]
        self.T[g], self.V[g] = T, V
        self.PP[g, 0], self.PP[g, 1:] = NEG_INF, pre[:-1]
        self.SN[g, -1], self.SN[g, :-1] = NEG_INF, suf[1:]
        self.TN[g, -1], self.TN[g, :-1] = 0.0, T[1:]
        self.W[g] = max(0.0, float(pre[-1]) - self.end)
        self.stale[g] = True

    def total(self) -> float:
        return float(self.W.sum())

    def plan(self) -> Plan:
        out: Plan = [[] for _ in range(self.H)]
        for q in np.flatnonzero(self.is_end):
            out[self.x[q]].append((int(self.job_start[q]), int(q)))
        return out

    def snapshot(self) -> tuple:
        return (self.x.copy(), self.is_end.copy(), self.T.copy(), self.V.copy(), self.PP.copy(),
                self.SN.copy(), self.TN.copy(), self.W.copy())

    def restore(self, snap: tuple) -> None:
        (self.x, self.is_end, self.T, self.V, self.PP, self.SN, self.TN, self.W) = (a.copy() for a in snap)
        self._jobs_changed()

    def _wait(self, drain: np.ndarray) -> np.ndarray:
        return np.maximum(drain - self.end, 0.0)

    # ---- move pricing (all candidates at once) -----------------------
    def _leave(self) -> np.ndarray:
        """Change of its iteration's wait if job q leaves (at job ends)."""
        a, q = self.x, self.pos
        drain = np.maximum(self.PP[a, q] - self.p, self.SN[a, q])
        return self._wait(drain) - self.W[a]

    def best_relocation(self) -> tuple[float, int, int]:
        p, r = self.p, self.r
        drain = np.maximum(np.maximum(self.PP + p, r + p + self.TN), self.SN)
        delta = self._wait(drain) - self.W[:, None] + self._leave()[None, :]
        delta[:, ~self.is_end] = np.inf
        delta[self.x, self.pos] = np.inf
        k = int(np.argmin(delta))
        g, q = divmod(k, self.M)
        return float(delta[g, q]), g, q

    def best_split(self) -> tuple[float, int]:
        k = np.flatnonzero(~self.is_end)
        if not len(k):
            return np.inf, -1
        q, a, s = self.job_end[k], self.x[k], self.job_start[k]
        head = self.alpha + self.csum[k + 1] - self.csum[s]
        tail = self.p[q] - head + self.alpha
        drain = _max(self.PP[a, q] + self.alpha, self.r[k] + head + tail + self.TN[a, q],
                     self.r[q] + tail + self.TN[a, q], self.SN[a, q])
        delta = self._wait(drain) - self.W[a]
        i = int(np.argmin(delta))
        return float(delta[i]), int(k[i])

    def best_merge(self) -> tuple[float, int]:
        q1 = np.flatnonzero(self.is_end[:-1] & (self.x[:-1] == self.x[1:]))
        if not len(q1):
            return np.inf, -1
        q2, a = self.job_end[q1 + 1], self.x[q1]
        drain = _max(self.PP[a, q1] - self.alpha, self.r[q2] + self.T[a, q2] + self.p[q1] - self.alpha,
                     self.SN[a, q2])
        delta = self._wait(drain) - self.W[a]
        i = int(np.argmin(delta))
        return float(delta[i]), int(q1[i])

    def best_attach(self) -> tuple[float, int, int]:
        """Move a job next to a job of another iteration and fuse with it (saves an alpha).

        Variants by the target's neighbour: its job starting right after
        (``side`` 1), ending right before (``side`` -1), or both (``side`` 0).
        """
        q = np.flatnonzero(self.is_end)
        s, a = self.job_start[q], self.x[q]
        content, leave = self.p[q] - self.alpha, self._leave()[q]
        M, best = self.M, (np.inf, -1, 0)
        nxt = np.minimum(q + 1, M - 1)
        prv = np.maximum(s - 1, 0)
        right = (q + 1 < M) & (self.x[nxt] != a)
        left = (s > 0) & (self.x[prv] != a)
        both = right & left & (self.x[prv] == self.x[nxt])
        g_r, q2 = self.x[nxt], self.job_end[nxt]
        g_l = self.x[prv]
        upto_q2 = np.maximum(self.PP[g_r, q2], self.V[g_r, q2])  # max V[g, <= q2]
        for side, ok, g, drain in (
            (1, right, g_r, np.maximum(upto_q2 + content, self.SN[g_r, q2])),
            (-1, left, g_l, _max(self.PP[g_l, prv] + content, self.r[q] + self.T[g_l, prv] + content, self.SN[g_l, q])),
            (0, both, g_l, _max(self.PP[g_l, prv] + content - self.alpha,
                                self.r[q2] + self.T[g_l, prv] + content - self.alpha, self.SN[g_l, q2])),
        ):
            delta = np.where(ok, self._wait(drain) - self.W[g] + leave, np.inf)
            i = int(np.argmin(delta))
            if delta[i] < best[0]:
                best = (float(delta[i]), int(q[i]), side)
        return best

    def attach(self, q: int, side: int) -> None:
        s, a = int(self.job_start[q]), int(self.x[q])
        g = int(self.x[q + 1] if side >= 0 else self.x[s - 1])
        self.x[s : q + 1] = g
        if side >= 0:
            self.is_end[q] = False
        if side <= 0:
            self.is_end[s - 1] = False
        self._jobs_changed()
        self._refresh(a)
        self._refresh(g)

    def best_shift(self) -> tuple[float, int, int]:
        """Move the boundary between adjacent jobs of different iterations by one unit.

        ``step`` -1: the last unit k of the output-side job joins the job
        after it; +1: the first unit k+1 of the input-side job joins the job
        before it.
        """
        k = np.flatnonzero(self.x[:-1] != self.x[1:])
        if not len(k):
            return np.inf, -1, 0
        a, b, q2 = self.x[k], self.x[k + 1], self.job_end[k + 1]
        pA, pB, r, c = self.p[k], self.p[q2], self.r, self.c
        alone_a, alone_b = self.job_start[k] == k, q2 == k + 1
        gone_a = np.maximum(self.PP[a, k] - pA, self.SN[a, k])
        prev = np.maximum(k - 1, 0)
        short_a = _max(self.PP[a, k] - c[k], r[prev] + pA - c[k] + self.TN[a, k], self.SN[a, k])
        upto_b = np.maximum(self.PP[b, q2], self.V[b, q2])
        down = (self._wait(np.where(alone_a, gone_a, short_a)) - self.W[a]
                + self._wait(np.maximum(upto_b + c[k], self.SN[b, q2])) - self.W[b])
        grow_a = _max(self.PP[a, k] + c[k + 1], r[k + 1] + self.T[a, k] + c[k + 1], self.SN[a, k + 1])
        gone_b = np.maximum(self.PP[b, k + 1] - pB, self.SN[b, k + 1])
        short_b = np.maximum(upto_b - c[k + 1], self.SN[b, q2])
        up = (self._wait(grow_a) - self.W[a]
              + self._wait(np.where(alone_b, gone_b, short_b)) - self.W[b])
        i, j = int(np.argmin(down)), int(np.argmin(up))
        return (float(down[i]), int(k[i]), -1) if down[i] <= up[j] else (float(up[j]), int(k[j]), 1)

    def shift(self, k: int, step: int) -> None:
        a, b = int(self.x[k]), int(self.x[k + 1])
        self.is_end[k] = False
        if step < 0:
            self.x[k] = b
            if k > 0:
                self.is_end[k - 1] = True
        else:
            self.x[k + 1] = a
            self.is_end[k + 1] = True
        self._jobs_changed()
        self._refresh(a)
        self._refresh(b)

    def _swap_rows(self, a: int) -> None:
        """Rows of D for the jobs of iteration a: a loses job u, gains job v."""
        U = np.flatnonzero((self.x == a) & self.is_end)
        self.stale[a] = False
        if not len(U):
            return
        V, cols = self.V[a], self.pos
        after = cols[None, :] > U[:, None]
        run = np.maximum.accumulate(np.where(after, V[None, :], NEG_INF), axis=1)  # max V[u+1..v]
        between_right = np.full_like(run, NEG_INF)
        between_right[:, 1:] = run[:, :-1]  # max V[u+1..v-1]
        before = cols[None, :] < U[:, None]
        run = np.maximum.accumulate(np.where(before, V[None, :], NEG_INF)[:, ::-1], axis=1)[:, ::-1]  # max V[v..u-1]
        between_left = np.full_like(run, NEG_INF)
        between_left[:, :-1] = run[:, 1:]  # max V[v+1..u-1]
        pu, pv, r = self.p[U][:, None], self.p[None, :], self.r[None, :]
        PP, SN, TN = self.PP[a][None, :], self.SN[a][None, :], self.TN[a][None, :]
        drain_left = _max(PP + pv - pu, r + pv + TN - pu, between_left - pu, self.SN[a, U][:, None])
        drain_right = _max(self.PP[a, U][:, None] + pv - pu, between_right + pv, r + pv + TN, SN)
        self.D[U] = self._wait(np.where(before, drain_left, drain_right)) - self.W[a]

    def best_swap(self) -> tuple[float, int, int]:
        if self.D is None:
            self.D = np.full((self.M, self.M), np.inf)
            self.stale[:] = True
        for a in np.flatnonzero(self.stale):
            self._swap_rows(int(a))
        delta = self.D + self.D.T
        invalid = (self.x[:, None] == self.x[None, :]) | ~self.is_end[:, None] | ~self.is_end[None, :]
        delta[invalid] = np.inf
        k = int(np.argmin(delta))
        u, v = divmod(k, self.M)
        return float(delta[u, v]), u, v

    # ---- moves ---------------------------------------------------------
    def _units(self, q: int) -> slice:
        return slice(int(self.job_start[q]), q + 1)

    def relocate(self, q: int, g: int) -> None:
        a = int(self.x[q])
        self.x[self._units(q)] = g
        self._refresh(a)
        self._refresh(g)

    def swap(self, u: int, v: int) -> None:
        a, b = int(self.x[u]), int(self.x[v])
        self.x[self._units(u)] = b
        self.x[self._units(v)] = a
        self._refresh(a)
        self._refresh(b)

    def split(self, k: int) -> None:
        self.is_end[k] = True
        self._jobs_changed()
        self._refresh(int(self.x[k]))

    def merge(self, q1: int) -> None:
        self.is_end[q1] = False
        self._jobs_changed()
        self._refresh(int(self.x[q1]))

    def descend(self, swaps: bool = False) -> None:
        """Steepest descent over relocate (and, with alpha > 0, split / merge / attach / shift);
        swaps (if asked) only when those are stuck."""
        fuse = self.alpha > 0
        while True:
            best, move = self.best_relocation(), "relocate"
            if fuse:
                for cand, name in ((self.best_split(), "split"), (self.best_merge(), "merge"),
                                   (self.best_attach(), "attach"), (self.best_shift(), "shift")):
                    if cand[0] < best[0]:
                        best, move = cand, name
            if best[0] >= -self.tol and swaps and self.H > 1:
                best, move = self.best_swap(), "swap"
            if best[0] >= -self.tol:
                return
            if move == "relocate":
                self.relocate(best[2], best[1])
            elif move == "swap":
                self.swap(best[1], best[2])
            elif move == "split":
                self.split(best[1])
            elif move == "merge":
                self.merge(best[1])
            elif move == "attach":
                self.attach(best[1], best[2])
            else:
                self.shift(best[1], best[2])

    def kick(self, rng: np.random.Generator, n: int) -> None:
        """Throw ``n`` random jobs (split off as single units) to random other iterations."""
        for k in rng.choice(self.M, size=min(n, self.M), replace=False):
            k = int(k)
            if not self.is_end[k] or (k > 0 and not self.is_end[k - 1]):
                self.is_end[k] = True
                if k > 0:
                    self.is_end[k - 1] = True
                self._jobs_changed()
            a = int(self.x[k])
            g = int(rng.integers(self.H - 1))
            g += g >= a
            self.x[k] = g
            self._refresh(a)
            self._refresh(g)
