"""fal's result (the image list of a completed request, a free GET) answered 200 with a page
that is no JSON (a captive portal's sign-in page, a proxy's): no test sent one before (outside
audit 52a measured the fal adapter's coverage). The request was rendered and billed; its result
is still at fal, so afc fetches it again (``fetched``'s tries, then ``outlast``'s later rounds)
rather than read the page as the result."""

from __future__ import annotations

from fakeproviders import CDN_OUTAGE
from test_output_refetch import write
from test_providers import attempts_of

from afc_cli.providers.http import FETCH_TRIES


def test_a_fal_result_answered_with_a_page_is_fetched_again_not_paid_again(afc, fake):
    """The first CDN_OUTAGE result GETs answer an HTML page (more than a round of tries): the
    job succeeds on its one request, its image stored. Would catch the page taken as the
    result ('completed without an image', a ``server`` failure: the next attempt paid fal
    for a second render), or taken for a definite failure that ends the paid attempt after
    one round."""
    write(afc, "fal", "result-page")
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    [attempt] = attempts_of(afc, "j0")
    assert (attempt["status"], attempt["number"]) == ("succeeded", 1), attempt
    assert attempt["cost"] == "0.025000", attempt
    assert fake.counts["fal_submit"] == 1, "one render, paid once"
    assert fake.counts["fal_result"] == CDN_OUTAGE + 1 > 2 * FETCH_TRIES
    assert "is out of reach" in result.stderr, result.stderr
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")
