import numpy as np

def count(words: np.ndarray, lengths: np.ndarray, map: np.ndarray, title_words: np.ndarray, title_lengths: np.ndarray,
          title_map: np.ndarray, tags: np.ndarray, tag_count: int, rows_of_term: np.ndarray,
          tag_rows_of_term: np.ndarray, row_lengths: np.ndarray, /) -> None: ...
def place(words: np.ndarray, lengths: np.ndarray, map: np.ndarray, title_words: np.ndarray, title_lengths: np.ndarray,
          title_map: np.ndarray, tags: np.ndarray, tag_count: int, row_lengths: np.ndarray, k1: float, b: float,
          average: float, block: int, term_offsets: np.ndarray, rows: np.ndarray, frequencies: np.ndarray,
          block_offsets: np.ndarray, block_last: np.ndarray, block_bound: np.ndarray, /) -> None: ...
def scores(postings: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]], weights: np.ndarray,
           lengths: np.ndarray, k1: float, b: float, average: float, rows: np.ndarray, out: np.ndarray, /) -> None: ...
def top(postings: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]], weights: np.ndarray,
        lengths: np.ndarray, k1: float, b: float, average: float, scale: float, allowed: np.ndarray | None,
        stored: np.ndarray | None, k: int, out_rows: np.ndarray, out_scores: np.ndarray, /) -> int: ...
