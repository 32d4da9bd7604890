"""Prompt lookup's proposals, read directly (no model): the match, the fallback and the periodic extension."""
import jax.numpy as jnp
import numpy as np

import specjax


def _propose(drafter, rows, gamma):
  width = max(map(len, rows)) + 2
  tokens = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    tokens[i, :len(r)] = r
  _, draft = drafter.propose((), jnp.asarray(tokens), jnp.asarray([len(r) for r in rows]), gamma, None, None)
  return np.asarray(draft.tokens_BxG).tolist(), np.asarray(draft.num_B).tolist()


ROWS = [[1, 2, 1, 2, 1],        # suffix (2, 1) last seen at 1: continuation 2, 1, then the loop repeats
        [3, 4, 5, 6, 7],        # no earlier occurrence of any suffix: nothing offered
        [9, 8, 7, 9, 8, 6, 5, 4, 3, 9, 8]]  # (9, 8) last seen at 3: continuation 6 5 4 3 9 8 (longer than gamma)


def test_periodic_extension_repeats_the_continuation():
  tokens, num = _propose(specjax.drafters.NGram(2), ROWS, gamma=5)
  assert tokens[0] == [2, 1, 2, 1, 2] and num[0] == 5
  assert num[1] == 0
  assert tokens[2] == [6, 5, 4, 3, 9] and num[2] == 5


def test_without_periodic_only_the_known_continuation_counts():
  tokens, num = _propose(specjax.drafters.NGram(2, periodic=False), ROWS, gamma=5)
  assert tokens[0][:2] == [2, 1] and num[0] == 2
  assert num[1] == 0
  assert tokens[2] == [6, 5, 4, 3, 9] and num[2] == 5


def test_the_registry_passes_periodic():
  assert specjax.drafters.build("ngram", {"periodic": False}, None).periodic is False
