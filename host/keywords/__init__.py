"""Keyword search: Okapi BM25 over each bit's text and title.

`analyzer` turns text into terms (the house's words, English stop words dropped, Snowball stems);
`postings` builds, at compile time, which rows hold each term and how often; `statistics` sums
the per-tag counts a caller may see; `top` finds the best rows of one library without scoring
every posting (block-max MaxScore, in C where built, `_postings.c`; numpy scores every posting
otherwise, with the same answers).
"""
