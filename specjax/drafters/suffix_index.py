"""A jittable suffix index: longest-suffix match over a row's text and a pool of earlier text, and the
continuation most frequent among the match's occurrences (SuffixDecoding, Oliaro et al., arXiv
2411.04975).

Everything is a pure function over explicit arrays, so it runs inside the decoding loop's
``jax.jit``. A suffix tree answers "where did the last k tokens occur before, and what followed"
in time independent of the text; here the same answer comes from one vectorised pass over the
searched text (``max_n`` comparisons per position), which for the pool sizes used (tens of
thousands of tokens) costs far less than one target step, and needs no pointer structure.

**The pool** (:class:`Pool`) is a ring buffer of token ids shared by every row (its shape does not
depend on the batch size): documents (a prompt followed by its output) are appended one after
another, each followed by the separator ``-1``; unwritten slots hold ``-1`` too. When the ring is
full the oldest tokens are overwritten first (eviction by age); a document longer than the ring
keeps its last ``capacity - 1`` tokens. A match never spans a separator and a continuation stops at
one. The ring is searched in slot order, so the one place the oldest document wraps from the last
slot to the first is read as two pieces (a match across that point is missed: a lost draft, never
a wrong token).

**Matching.** The searched text of a row is ``[pool, -1, other rows' text (scope "batch": the next
``PEERS`` rows), own text]``, own text last so that among equally long matches the most recent are the row's own. The
match length at a position is the number of the row's last tokens (at most ``max_n``) that the
text ending there repeats. The longest match ``k`` wins; of its occurrences the ``top`` latest
are kept, and the draft follows them token by token: at each depth the token that most of the
still-agreeing occurrences continue with (ties: the latest occurrence's), whose share of them is
the draft's empirical probability there (``confidence``); occurrences that continue differently
drop out. The chain stops where no occurrence continues, where that share falls below
``min_prob``, or after ``ceil(factor * k)`` tokens (draft length grows with the match length).
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
import numpy as np

SEP = -1  # separates documents in the searched text, and fills unwritten pool slots
PEERS = 8  # scope "batch": how many other rows each row searches (rows b+1..b+PEERS, cyclically)


@flax.struct.dataclass
class Pool:
  """A ring buffer of earlier text shared by all rows: ``tokens_N`` (int32, ``SEP`` between
  documents and in unwritten slots) and ``write`` (int32 scalar: the next slot written)."""
  tokens_N: jax.Array
  write: jax.Array

  @classmethod
  def create(cls, capacity: int) -> "Pool":
    if isinstance(capacity, bool) or int(capacity) != capacity or capacity < 2:
      raise ValueError(f"pool capacity must be an integer >= 2 (tokens), got {capacity!r}")
    return cls(jnp.full((int(capacity),), SEP, jnp.int32), jnp.zeros((), jnp.int32))

  @property
  def capacity(self) -> int:
    return int(self.tokens_N.shape[0])


@jax.jit
def add(pool: Pool, docs_NxT, lengths_N) -> Pool:
  """``pool`` with each document ``docs[d, :lengths[d]]`` appended in order, each followed by ``SEP``
  (the oldest slots are overwritten once the ring is full)."""
  n = pool.tokens_N.shape[0]
  t = docs_NxT.shape[1]
  i_T = jnp.arange(t + 1)

  def one(d, pool):
    length = jnp.minimum(lengths_N[d], n - 1)  # a longer document keeps its tail
    skip = lengths_N[d] - length
    src_T = kv_gather(docs_NxT[d], skip + i_T)
    vals_T = jnp.where(i_T < length, src_T, SEP)
    slots_T = jnp.where(i_T <= length, (pool.write + i_T) % n, n)  # n: out of range, dropped
    tokens = pool.tokens_N.at[slots_T].set(vals_T.astype(jnp.int32), mode="drop")
    return Pool(tokens, (pool.write + length + 1) % n)

  return jax.lax.fori_loop(0, docs_NxT.shape[0], one, pool)


def kv_gather(x_T, idx_T):
  """``x[idx]`` with indices past the end reading ``SEP``."""
  return jnp.where(idx_T < x_T.shape[0], x_T[jnp.clip(idx_T, 0, x_T.shape[0] - 1)], SEP)


def row_text(tokens_BxS, seq_len_B):
  """Each row's committed tokens, ``SEP`` past its length."""
  pos_S = jnp.arange(tokens_BxS.shape[1])
  return jnp.where(pos_S[None] < seq_len_B[:, None], tokens_BxS, SEP).astype(jnp.int32)


def searched_text(pool: Pool | None, tokens_BxS, seq_len_B, others: bool):
  """``(text_BxT, own_start)``: per row ``[pool, SEP, (other rows' text, each + SEP), own text]``;
  own text starts at column ``own_start``. ``others``: the ``PEERS`` rows after this one (cyclically;
  every other row when the batch has at most ``PEERS + 1``)."""
  b, s = tokens_BxS.shape
  own_BxS = row_text(tokens_BxS, seq_len_B)
  parts = []
  if pool is not None:
    parts.append(jnp.broadcast_to(jnp.concatenate([pool.tokens_N, jnp.full((1,), SEP, jnp.int32)])[None],
                                  (b, pool.tokens_N.shape[0] + 1)))
  if others:  # the next PEERS rows' text (cyclically): a cost bounded at any batch size
    rows_BxS1 = jnp.concatenate([own_BxS, jnp.full((b, 1), SEP, jnp.int32)], 1)
    for k in range(min(b - 1, PEERS), 0, -1):
      parts.append(jnp.roll(rows_BxS1, -k, axis=0))
  own_start = sum(p.shape[1] for p in parts)
  return jnp.concatenate(parts + [own_BxS], 1), own_start


def match_lengths(text_BxT, query_BxN):
  """``[B, T]``: how many of the query's last tokens (up to N) the text ending at each position repeats."""
  n = query_BxN.shape[1]
  run_BxT = jnp.ones(text_BxT.shape, bool)
  m_BxT = jnp.zeros(text_BxT.shape, jnp.int32)
  for i in range(n):  # the text's i-th token back against the query's i-th from its end
    back_BxT = jnp.pad(text_BxT, ((0, 0), (i, 0)), constant_values=SEP)[:, :text_BxT.shape[1]]
    run_BxT &= (back_BxT == query_BxN[:, n - 1 - i:n - i]) & (back_BxT != SEP)
    m_BxT += run_BxT
  return m_BxT


@flax.struct.dataclass
class Match:
  tokens_BxG: jax.Array      # the draft (filled with the row's last token past ``num_B``)
  num_B: jax.Array           # drafts that count: 0 without a match
  confidence_BxG: jax.Array  # the draft token's share of the occurrences still agreeing (0 past num_B)
  match_B: jax.Array         # the longest match's length (0: none)


def longest_match(text_BxT, own_start, seq_len_B, gamma: int, *, max_n: int, min_match: int = 1,
                  top: int = 32, factor: float = 1.0, min_prob: float = 0.0) -> Match:
  """The draft of :mod:`this module <specjax.drafters.suffix_index>` for each row (see its docstring)."""
  b, length = text_BxT.shape
  pos_T = jnp.arange(length)
  end_B = own_start + seq_len_B  # one past the row's last token
  query_BxN = jnp.take_along_axis(text_BxT, jnp.clip(end_B[:, None] - max_n + jnp.arange(max_n)[None], 0,
                                                     length - 1), 1)
  query_BxN = jnp.where(end_B[:, None] - max_n + jnp.arange(max_n)[None] >= own_start, query_BxN, -2)
  m_BxT = match_lengths(text_BxT, query_BxN)
  nxt_BxT = jnp.pad(text_BxT[:, 1:], ((0, 0), (0, 1)), constant_values=SEP)
  # an occurrence ends before the row's last token (not the query itself) and has a next token
  m_BxT = jnp.where((pos_T[None] < end_B[:, None] - 1) & (nxt_BxT != SEP), m_BxT, 0)
  k_B = jnp.max(m_BxT, 1)
  found_B = k_B >= min_match
  occ_BxT = (m_BxT == k_B[:, None]) & found_B[:, None]
  top = min(top, length)
  latest_BxM, idx_BxM = jax.lax.top_k(jnp.where(occ_BxT, pos_T[None], -1), top)  # latest first
  valid_BxM = latest_BxM >= 0
  cont_idx_BxMxG = idx_BxM[:, :, None] + 1 + jnp.arange(gamma)[None, None]
  cont_BxMxG = jnp.take_along_axis(text_BxT, jnp.clip(cont_idx_BxMxG, 0, length - 1).reshape(b, -1),
                                   1).reshape(b, top, gamma)
  cont_BxMxG = jnp.where(cont_idx_BxMxG < length, cont_BxMxG, SEP)
  cont_BxMxG = jnp.where(jnp.cumprod(cont_BxMxG != SEP, axis=2).astype(bool), cont_BxMxG, SEP)

  last_B = jnp.take_along_axis(text_BxT, (end_B - 1)[:, None], 1)[:, 0]
  recency_M = jnp.arange(top, 0, -1)  # ties: the latest occurrence
  active_BxM = valid_BxM
  alive_B = found_B
  toks, confs, alive = [], [], []
  for d in range(gamma):
    c_BxM = cont_BxMxG[:, :, d]
    ok_BxM = active_BxM & (c_BxM != SEP)
    same_BxMxM = (c_BxM[:, :, None] == c_BxM[:, None, :]) & ok_BxM[:, None, :]
    count_BxM = jnp.where(ok_BxM, same_BxMxM.sum(2), 0)
    best_B = jnp.argmax(count_BxM * (top + 1) + recency_M[None] * ok_BxM, 1)
    count_B = jnp.take_along_axis(count_BxM, best_B[:, None], 1)[:, 0]
    tok_B = jnp.take_along_axis(c_BxM, best_B[:, None], 1)[:, 0]
    share_B = count_B / jnp.maximum(ok_BxM.sum(1), 1)
    alive_B = alive_B & (count_B > 0) & (share_B >= min_prob)
    toks.append(jnp.where(alive_B, tok_B, last_B))
    confs.append(jnp.where(alive_B, share_B, 0.0).astype(jnp.float32))
    alive.append(alive_B)
    active_BxM = ok_BxM & (c_BxM == tok_B[:, None])
  cap_B = jnp.minimum(jnp.ceil(factor * k_B).astype(jnp.int32), gamma)
  num_B = jnp.minimum(jnp.stack(alive, 1).sum(1).astype(jnp.int32), cap_B)
  num_B = jnp.where(found_B, num_B, 0)
  g_G = jnp.arange(gamma)[None]
  conf_BxG = jnp.where(g_G < num_B[:, None], jnp.stack(confs, 1), 0.0)
  return Match(jnp.stack(toks, 1).astype(jnp.int32), num_B, conf_BxG, jnp.where(found_B, k_B, 0))


# ----------------------------------------------------------------------------- numpy reference
def reference_match(text, own_start: int, seq_len: int, gamma: int, *, max_n: int, min_match: int = 1,
                    top: int = 32, factor: float = 1.0, min_prob: float = 0.0):
  """One row's ``(tokens, num, match)`` by brute force over a 1-D numpy text (the tests' reference)."""
  text = [int(x) for x in text]
  end = own_start + seq_len
  query = text[max(own_start, end - max_n):end]
  best, occ = 0, []
  for j in range(end - 1):
    if j + 1 >= len(text) or text[j + 1] == SEP:
      continue
    m = 0
    while m < len(query) and j - m >= 0 and text[j - m] != SEP and text[j - m] == query[len(query) - 1 - m]:
      m += 1
    if m > best:
      best, occ = m, [j]
    elif m == best and m > 0:
      occ.append(j)
  if best < min_match:
    return [], 0, 0
  occ = sorted(occ, reverse=True)[:top]
  conts = []
  for j in occ:
    c = []
    for i in range(j + 1, min(j + 1 + gamma, len(text))):
      if text[i] == SEP:
        break
      c.append(text[i])
    conts.append(c)
  active = list(range(len(occ)))
  out = []
  for d in range(gamma):
    ok = [i for i in active if len(conts[i]) > d]
    if not ok:
      break
    counts = {}
    for i in ok:
      counts[conts[i][d]] = counts.get(conts[i][d], 0) + 1
    top_count = max(counts.values())
    tok = next(conts[i][d] for i in ok if counts[conts[i][d]] == top_count)  # ok is latest first
    if top_count / len(ok) < min_prob:
      break
    out.append(tok)
    active = [i for i in ok if conts[i][d] == tok]
  num = min(len(out), int(np.ceil(factor * best)), gamma)
  return out[:num], num, best


def reference_pool(capacity: int, docs) -> list:
  """The ring's slots after appending ``docs`` (lists of ids) in order, by brute force."""
  slots, write = [SEP] * capacity, 0
  for doc in docs:
    doc = list(doc)[-(capacity - 1):] if len(doc) > capacity - 1 else list(doc)
    for tok in doc + [SEP]:
      slots[write] = int(tok)
      write = (write + 1) % capacity
  return slots
