"""docs/test-budget.md gives every test file and notebook the seconds it may take in `make test`: a file that lands
without its row fails here, and the row's budget is what the next change to it is held to (measured with
`pytest --durations=0`, never timed in a test)."""

from minitrain.paths import REPO


def test_every_test_file_and_notebook_has_a_budget(budget):
    rows = {path: allowed for path, (_, allowed) in budget.items()}
    files = sorted(str(p.relative_to(REPO))
                   for p in [*REPO.glob("tests/**/test_*.py"), *REPO.glob("notebooks/*.ipynb")])
    missing = [f for f in files if f not in rows]
    assert missing == [], (f"docs/test-budget.md has no row for {', '.join(missing)}: run it under "
                           "`pytest --durations=0` and add `| `FILE` | measured | budget |` (seconds)")
    assert all(allowed > 0 for allowed in rows.values()), rows
