"""docs/comparing.md's worked example is what its own code prints (run here), and the rules the page states are
the ones fedala_lab/analysis/stats.py applies. To refresh the page after a change: ``python
tests/test_comparing_doc.py`` rewrites the example's output block."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "comparing.md"
EXAMPLE = re.compile(r"(<!-- example:start -->\n```python\n)(.*?)(```\n\n```text\n)(.*?)(```\n<!-- example:end -->)",
                     re.DOTALL)


def _printed(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(PAGE), "exec"), {})  # noqa: S102 - the page's own code, as a reader would run it
    return out.getvalue()


def test_the_worked_example_is_what_its_code_prints():
    m = EXAMPLE.search(PAGE.read_text())
    assert m, "docs/comparing.md has no worked example between its markers"
    assert _printed(m.group(2)) == m.group(4), f"docs/comparing.md's example is stale: run {Path(__file__).name}"


def test_the_page_states_the_rules_the_code_applies():
    from fedala_lab.analysis import stats

    text = " ".join(PAGE.read_text().split())
    assert f"below {stats.BOOTSTRAP_FROM} seeds Student's t" in text
    assert f"from {stats.BOOTSTRAP_FROM} seeds on a percentile bootstrap" in text
    assert f"{stats.RESAMPLES:,} resamples" in text
    assert f"below {stats.WILCOXON_FROM} seeds it cannot reach {stats.ALPHA:.2f}" in text
    assert stats.wilcoxon_min_p(stats.WILCOXON_FROM) < stats.ALPHA <= stats.wilcoxon_min_p(stats.WILCOXON_FROM - 1)
    assert f"{round(100 * stats.LEVEL)} % interval" in text and f"the worst {round(100 * stats.WORST_SHARE)} %" in text
    readme = (ROOT / "README.md").read_text()
    use_it = readme[readme.index("## Use it"):readme.index("\n## ", readme.index("## Use it") + 1)]
    assert "docs/comparing.md" in use_it


if __name__ == "__main__":  # rewrite the example's output from its code
    sys.path.insert(0, str(ROOT))
    page = PAGE.read_text()
    m = EXAMPLE.search(page)
    PAGE.write_text(page[:m.start(4)] + _printed(m.group(2)) + page[m.end(4):])
