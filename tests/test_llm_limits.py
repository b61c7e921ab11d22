"""Rate limits (evireform.llm.limits)."""

import pytest

pytest.importorskip("openai")


def test_rate_limiter_with_a_fake_clock():
    from evireform.llm import DeadlineExceeded, RateLimiter
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s
    lim = RateLimiter(rpm=2, tpm=1000, clock=lambda: now[0], sleep=sleep)
    assert lim.wait(10) == 0 and lim.wait(10) == 0
    assert lim.wait(10) == pytest.approx(60.0)  # the third request waits for the window
    now[0] += 60
    assert lim.wait(900) == 0
    assert lim.wait(200) > 0  # 1,100 tokens in a minute: waits
    with pytest.raises(DeadlineExceeded):
        lim.wait(990, until=now[0] + 1)
