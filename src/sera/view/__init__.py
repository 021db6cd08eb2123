"""`sera view`: one self-contained HTML page of rollout trees (a tree file or a whole run).

`sources` finds and reads the tree files, `build` turns a tree into the view model of
`records`, `page` writes the page around the `assets/` template, stylesheet and script.
"""

from sera.view.page import ViewResult, default_output, write_view
from sera.view.sources import ViewError

__all__ = ["ViewError", "ViewResult", "default_output", "write_view"]
