"""`sera report`: recorded runs (evaluation and training directories) turned into the paper's
tables (success by difficulty, supervision spent, wall clock, best-of-N) and PNG plots, written as
one Markdown page and a JSON file of the same numbers.

It is also the reporting layer the pipeline report and `sera eval`'s console output use:
statistics come from `sera.stats`; `wording` (the one rule for claiming a change), `tables`
(every table, Markdown and terminal) and `plots` (every PNG) are shared.

Modules, one job each: `records` (typed records of what was read), `discover` (finding run
directories below the paths given), `load_eval` / `load_train` (reading one directory),
`aggregate` (grouping runs into rows, mean ± std over seeds), `bestof` (Table 4's pairing),
`train_stats` (stage times, curves), `wording`, `tables`, `plots`, `console` (what `sera eval`
prints) and `writer` (the whole `sera report`).
"""
