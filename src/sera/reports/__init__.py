"""`sera report`: recorded runs (evaluation and training directories) turned into the paper's
tables (success by difficulty, supervision spent, wall clock, best-of-N) and PNG plots, written as
one Markdown page and a JSON file of the same numbers.

Modules, one job each: `records` (typed records of what was read), `discover` (finding run
directories below the paths given), `load_eval` / `load_train` (reading one directory),
`aggregate` (grouping runs into rows, mean ± std over seeds), `tables` (Markdown), `plots`
(matplotlib, Agg) and `writer` (the whole report).
"""
