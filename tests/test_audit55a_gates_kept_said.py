"""A gate added to a batch's defaults between nights, end to end through ``afc`` (an outside
audit): ``review: true`` written in ``defaults`` of a list whose jobs are rendered takes
effect on none of them, and each is said. A submit said every one on stderr, also under
``-q``, as cron runs it: a 10,000-job list printed 10,000 warnings (2.7 MB) every night, the
summary lost above them, where conflicts, after the same edit of the defaults, are said for
the first 20 and counted after."""

from __future__ import annotations

from conftest import manifest


def test_a_submit_says_the_first_gates_kept_and_counts_the_rest(afc):
    data = manifest([{"key": f"s{i:02d}", "prompt": f"shot {i}"} for i in range(25)])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "-q").returncode == 0

    data["defaults"]["review"] = True
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "-q")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "does not take effect" in line]
    assert len(warnings) == 20, result.stderr
    assert (
        "afc: 5 more keys keep the gates they were admitted with, as these (afc plan MANIFEST "
        "names each, --json carries every one)"
    ) in result.stderr

    # every one is still named where asked for
    assert len(afc.json("submit", "manifest.yaml")["gates_kept"]) == 25
    plan = afc("plan", "manifest.yaml").stdout
    assert plan.count("does not take effect") == 25
