import numpy as np

Field = tuple[np.ndarray, np.ndarray, int]  # positions, term offsets, shift

def count(fields: list[Field], term_words: np.ndarray, word_fields: np.ndarray, word_numbers: np.ndarray,
          tags: np.ndarray, tag_count: int, rows_of_term: np.ndarray, tag_rows_of_term: np.ndarray,
          row_lengths: np.ndarray, /) -> None: ...
def place(fields: list[Field], term_words: np.ndarray, word_fields: np.ndarray, word_numbers: np.ndarray,
          tags: np.ndarray, tag_count: int, row_lengths: np.ndarray, k1: float, b: float, average: float, block: int,
          term_offsets: np.ndarray, rows: np.ndarray, frequencies: np.ndarray, block_offsets: np.ndarray,
          block_last: np.ndarray, block_bound: np.ndarray, /) -> None: ...
def top(postings: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]], weights: np.ndarray,
        lengths: np.ndarray, k1: float, b: float, average: float, scale: float, allowed: np.ndarray | None,
        keys: np.ndarray | None, k: int, out_rows: np.ndarray, out_scores: np.ndarray, /) -> int: ...
