"""Outside audit 32c: a fal submit answer naming a URL httpx cannot parse is not a bug in afc."""

from __future__ import annotations

from test_audit_wire import PNG, WireServer, answered, fal_queue, run_fal


def test_a_fal_status_url_whose_host_idna_refuses_is_passed_over_not_a_stopped_run(afc):
    """fal's submit answer names its status, result and cancel URLs; afc uses them where they
    are on the queue's own origin, else its own (tests/test_audit_wire.py). One whose host
    name IDNA refuses ('http://xn--/...', from a proxy in front of fal or a fal gone wrong)
    raised IDNA's error out of http_url (it took httpx.InvalidURL only), right after the paid
    submit: 'afc could not read the answer (IDNAError ...) ... a bug in afc's fal adapter',
    the run stopped. Such a URL is no URL afc can request: afc polls its own, and the render
    is fetched as usual."""
    provider = WireServer(answered(b""))
    provider.behaviour = fal_queue("http://xn--")
    try:
        result = run_fal(afc, provider)
        assert result.returncode == 0, result.stderr
        assert "bug" not in result.stderr and "Traceback" not in result.stderr
        assert [head.split(b" ")[1] for head, _ in provider.received] == [
            b"/fal-ai/flux/dev",
            b"/fal-ai/flux/requests/r1/status",
            b"/fal-ai/flux/requests/r1",
        ]
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
    finally:
        provider.stop()
