"""The `sera` commands, one module each: options parsed, a library function called, its result
printed. The work itself lives in the library (`sera.eval.run`, `sera.eval.play`, `sera.train`,
...), so that Python code can do what a command does (README, "Use from Python")."""
