"""A jittable suffix index: longest-suffix match over a row's text and a pool of earlier text, and the
continuation most frequent among the match's occurrences (SuffixDecoding, Oliaro et al., arXiv
2411.04975).

Everything is a pure function over explicit arrays, so it runs inside the decoding loop's
``jax.jit``. The row's own text (and, scope "batch", its peers' live text) is searched by one
vectorised pass (``max_n`` comparisons per position: a few hundred positions). The pool, which can
hold hundreds of thousands of tokens, is searched through its **index**, rebuilt on the host
whenever documents are added: for every n-gram length ``n = 1..key_len`` the pool's slots sorted
by a 32-bit hash of the n tokens ending there (ties: the latest slot first). A lookup is one
binary search per length (``log2(capacity)`` steps), so a round costs the same at any pool size;
each candidate's tokens are compared with the row's, so a hash collision loses a draft, never
proposes a wrong continuation as a match.

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

import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np

SEP = -1  # separates documents in the searched text, and fills unwritten pool slots
PEERS = 8  # scope "batch": how many other rows each row searches (rows b+1..b+PEERS, cyclically)
KEY_LEN = 16  # a pool indexes n-grams up to this length (a longer match in the pool counts as this long)
HASH_MUL = np.uint32(0x9E3779B1)  # the n-gram hash: h = h * HASH_MUL + (token + 1), newest token first
NO_HASH = np.uint32(0xFFFFFFFF)   # slots that cannot start a continuation


@flax.struct.dataclass
class Pool:
  """A ring buffer of earlier text shared by all rows, and its n-gram index.

  ``tokens_N`` (int32, ``SEP`` between documents and in unwritten slots); ``write`` (int32 scalar:
  the next slot written); ``hash_OxN`` (uint32): for n = k + 1, the sorted hashes of the n tokens
  ending at each slot that can start a continuation (others: ``NO_HASH``, sorted last);
  ``slot_OxN`` (int32): the slot of each sorted hash (equal hashes: latest slot first)."""
  tokens_N: jax.Array
  write: jax.Array
  hash_OxN: jax.Array
  slot_OxN: jax.Array

  @classmethod
  def create(cls, capacity: int, key_len: int = KEY_LEN) -> "Pool":
    if isinstance(capacity, bool) or int(capacity) != capacity or capacity < 2:
      raise ValueError(f"pool capacity must be an integer >= 2 (tokens), got {capacity!r}")
    if isinstance(key_len, bool) or int(key_len) != key_len or key_len < 1:
      raise ValueError(f"pool key_len must be an integer >= 1 (longest n-gram indexed), got {key_len!r}")
    tokens = np.full((int(capacity),), SEP, np.int32)
    return with_index(tokens, np.zeros((), np.int32), int(key_len))

  @property
  def capacity(self) -> int:
    return int(self.tokens_N.shape[0])

  @property
  def key_len(self) -> int:
    return int(self.hash_OxN.shape[0])


def ngram_hashes(tokens_N, key_len: int) -> np.ndarray:
  """``[key_len, N]`` uint32: row k holds the hash of the k + 1 tokens ending at each slot
  (:func:`query_hashes`' hash), ``NO_HASH`` where one of them is ``SEP`` or before slot 0, or where
  no token follows the slot (its next slot is ``SEP`` or past the end)."""
  t = np.asarray(tokens_N, np.int64)
  n = len(t)
  has_next = np.append(t[1:] != SEP, False)
  alive = np.ones(n, bool)
  h = np.zeros(n, np.uint32)
  out = np.empty((key_len, n), np.uint32)
  for k in range(key_len):
    back = np.full(n, SEP, np.int64)
    back[k:] = t[:max(n - k, 0)]  # the token k slots back
    alive &= back != SEP
    h = h * HASH_MUL + (back + 1).astype(np.uint32)  # uint32 arithmetic wraps, as in JAX
    out[k] = np.where(alive & has_next, h, NO_HASH)
  return out


def with_index(tokens_N, write, key_len: int) -> Pool:
  """A :class:`Pool` over ``tokens_N`` with its n-gram index (built on the host)."""
  tokens_N = np.asarray(tokens_N, np.int32)
  n = len(tokens_N)
  hashes = ngram_hashes(tokens_N, key_len)
  # one sort of (hash, newest first) packed in 64 bits: the high half the hash, the low half n - 1 - slot
  packed = np.sort((hashes.astype(np.uint64) << np.uint64(32)) | (n - 1 - np.arange(n, dtype=np.uint64)), axis=1)
  slot = (n - 1 - (packed & np.uint64(0xFFFFFFFF)).astype(np.int64)).astype(np.int32)
  return Pool(jnp.asarray(tokens_N), jnp.asarray(write, jnp.int32),
              jnp.asarray((packed >> np.uint64(32)).astype(np.uint32)), jnp.asarray(slot))


def add(pool: Pool, docs_DxT, lengths_D) -> Pool:
  """``pool`` with each document ``docs[d, :lengths[d]]`` appended in order, each followed by ``SEP``
  (the oldest slots are overwritten once the ring is full), and its index rebuilt."""
  tokens, write = _append(pool.tokens_N, pool.write, jnp.asarray(docs_DxT, jnp.int32),
                          jnp.asarray(lengths_D, jnp.int32))
  return with_index(np.asarray(tokens), np.asarray(write), pool.key_len)


@jax.jit
def _append(tokens_N, write, docs_DxT, lengths_D):
  n = tokens_N.shape[0]
  t = docs_DxT.shape[1]
  i_T = jnp.arange(t + 1)

  def one(d, carry):
    tokens, write = carry
    length = jnp.minimum(lengths_D[d], n - 1)  # a longer document keeps its tail
    skip = lengths_D[d] - length
    src_T = kv_gather(docs_DxT[d], skip + i_T)
    vals_T = jnp.where(i_T < length, src_T, SEP)
    slots_T = jnp.where(i_T <= length, (write + i_T) % n, n)  # n: out of range, dropped
    return tokens.at[slots_T].set(vals_T.astype(jnp.int32), mode="drop"), (write + length + 1) % n

  return jax.lax.fori_loop(0, docs_DxT.shape[0], one, (tokens_N, write))


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


def longest_match(pools, tokens_BxS, seq_len_B, gamma: int, *, others: bool, max_n: int,
                  min_match: int = 1, top: int = 32, factor: float = 1.0, min_prob: float = 0.0) -> Match:
  """The draft of :mod:`this module <specjax.drafters.suffix_index>` for each row (see its docstring):
  the longest match in the row's text (``others``: and its peers') and in each of ``pools`` (a Pool,
  a sequence of them, most recent text first, or None), through their indexes. Among occurrences of
  the longest match, the row's come first, then each pool's in order, each latest first."""
  pools = () if pools is None else (pools,) if isinstance(pools, Pool) else tuple(pools)
  text_BxT, own_start = searched_text(None, tokens_BxS, seq_len_B, others)
  found = [_scanned_occurrences(text_BxT, own_start, seq_len_B, gamma, max_n, top)]
  found += [_pool_occurrences(p, text_BxT, own_start, seq_len_B, gamma, min(max_n, p.key_len), top) for p in pools]
  k_B = found[0][0]
  cont_BxMxG, valid_BxM = found[0][1], found[0][2]
  if pools:
    k_B = functools.reduce(jnp.maximum, [f[0] for f in found])
    valid_BxM = jnp.concatenate([v & (k == k_B)[:, None] for k, _, v in found], 1)
    cont_BxMxG = jnp.concatenate([c for _, c, _ in found], 1)
    m = valid_BxM.shape[1]  # the first ``top`` valid ones, in the order above
    _, pick_BxM = jax.lax.top_k(jnp.where(valid_BxM, m - jnp.arange(m)[None], -1), top)
    valid_BxM = jnp.take_along_axis(valid_BxM, pick_BxM, 1)
    cont_BxMxG = jnp.take_along_axis(cont_BxMxG, pick_BxM[:, :, None], 1)
  end_B = own_start + seq_len_B
  last_B = jnp.take_along_axis(text_BxT, (end_B - 1)[:, None], 1)[:, 0]
  return _vote(k_B, cont_BxMxG, valid_BxM, last_B, gamma, min_match=min_match, factor=factor, min_prob=min_prob)


def _continuations(src_BxT, idx_BxM, valid_BxM, gamma: int):
  """``[B, M, gamma]``: the tokens after each occurrence, ``SEP`` from the first ``SEP`` on."""
  b, length = src_BxT.shape
  top = idx_BxM.shape[1]
  cont_idx_BxMxG = idx_BxM[:, :, None] + 1 + jnp.arange(gamma)[None, None]
  cont_BxMxG = jnp.take_along_axis(src_BxT, jnp.clip(cont_idx_BxMxG, 0, length - 1).reshape(b, -1),
                                   1).reshape(b, top, gamma)
  cont_BxMxG = jnp.where((cont_idx_BxMxG < length) & valid_BxM[:, :, None], cont_BxMxG, SEP)
  return jnp.where(jnp.cumprod(cont_BxMxG != SEP, axis=2).astype(bool), cont_BxMxG, SEP)


def _scanned_occurrences(text_BxT, own_start, seq_len_B, gamma: int, max_n: int, top: int):
  """``(k_B, cont_BxMxG, valid_BxM)``: the longest match in the scanned text and its ``top`` latest
  occurrences' continuations (``M = top``)."""
  length = text_BxT.shape[1]
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
  occ_BxT = (m_BxT == k_B[:, None]) & (k_B > 0)[:, None]
  if length < top:  # fewer positions than occurrences kept: pad
    occ_BxT = jnp.pad(occ_BxT, ((0, 0), (0, top - length)))
    pos_T = jnp.arange(top)
  latest_BxM, idx_BxM = jax.lax.top_k(jnp.where(occ_BxT, pos_T[None], -1), top)  # latest first
  valid_BxM = latest_BxM >= 0
  return k_B, _continuations(text_BxT, idx_BxM, valid_BxM, gamma), valid_BxM


def query_hashes(back_BxO):
  """``[B, O]`` uint32: column k the hash of the row's last k + 1 tokens (``back_BxO[:, 0]`` the last)."""
  h_B = jnp.zeros(back_BxO.shape[:1], jnp.uint32)
  out = []
  for k in range(back_BxO.shape[1]):
    h_B = h_B * jnp.uint32(HASH_MUL) + (back_BxO[:, k] + 1).astype(jnp.uint32)
    out.append(h_B)
  return jnp.stack(out, 1)


def _pool_occurrences(pool: Pool, text_BxT, own_start, seq_len_B, gamma: int, levels: int, top: int):
  """``(k_B, cont_BxMxG, valid_BxM)`` in the pool, by its index: the longest n-gram (n <= ``levels``)
  ending the row that the pool holds with a next token, and up to ``top`` of its latest occurrences."""
  length = text_BxT.shape[1]
  n = pool.tokens_N.shape[0]
  end_B = own_start + seq_len_B
  back_idx_BxO = end_B[:, None] - 1 - jnp.arange(levels)[None]
  back_BxO = jnp.where(back_idx_BxO >= own_start,
                       jnp.take_along_axis(text_BxT, jnp.clip(back_idx_BxO, 0, length - 1), 1), SEP)
  alive_BxO = jnp.cumprod(back_BxO != SEP, axis=1).astype(bool)
  h_BxO = query_hashes(back_BxO)
  hash_OxN, slot_OxN = pool.hash_OxN[:levels], pool.slot_OxN[:levels]
  search = lambda side: jax.vmap(lambda a, v: jnp.searchsorted(a, v, side=side), (0, 1), 1)(hash_OxN, h_BxO)
  lo_BxO, hi_BxO = search("left"), search("right")
  level_O = jnp.arange(levels)

  def matches(slot_BxM, k_BxM):  # [B, M]: the k + 1 tokens ending at each slot equal the row's last ones
    idx_BxMxO = slot_BxM[:, :, None] - level_O[None, None]
    tok_BxMxO = jnp.where(idx_BxMxO >= 0, pool.tokens_N[jnp.clip(idx_BxMxO, 0, n - 1)], SEP)
    return jnp.all((tok_BxMxO == back_BxO[:, None]) | (level_O[None, None] > k_BxM[:, :, None]), 2)

  first_BxO = slot_OxN[level_O[None], jnp.clip(lo_BxO, 0, n - 1)]
  ok_BxO = (hi_BxO > lo_BxO) & alive_BxO & (h_BxO != NO_HASH) & matches(first_BxO, jnp.broadcast_to(level_O, lo_BxO.shape))
  k_B = jnp.max(jnp.where(ok_BxO, level_O[None] + 1, 0), 1)
  level_B = jnp.maximum(k_B - 1, 0)
  lo_B = jnp.take_along_axis(lo_BxO, level_B[:, None], 1)[:, 0]
  hi_B = jnp.take_along_axis(hi_BxO, level_B[:, None], 1)[:, 0]
  idx_BxM = lo_B[:, None] + jnp.arange(top)[None]
  slot_BxM = slot_OxN[level_B[:, None], jnp.clip(idx_BxM, 0, n - 1)]
  valid_BxM = (idx_BxM < hi_B[:, None]) & (k_B > 0)[:, None] & matches(slot_BxM, jnp.broadcast_to(level_B[:, None], slot_BxM.shape))
  tokens_BxN = jnp.broadcast_to(pool.tokens_N[None], (text_BxT.shape[0], n))
  return k_B, _continuations(tokens_BxN, slot_BxM, valid_BxM, gamma), valid_BxM


def _vote(k_B, cont_BxMxG, valid_BxM, last_B, gamma: int, *, min_match: int, factor: float, min_prob: float) -> Match:
  """The chain the occurrences agree on (see the module docstring), as a :class:`Match`."""
  top = valid_BxM.shape[1]
  found_B = k_B >= min_match
  recency_M = jnp.arange(top, 0, -1)  # ties: the latest occurrence
  active_BxM = valid_BxM & found_B[:, None]
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
