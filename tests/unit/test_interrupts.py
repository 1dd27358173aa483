"""The stop signals as an exception, and blocks during which they wait (interrupts.py)."""

import os
import signal
import threading
import time

import pytest

from convmatrix import interrupts


def interrupted_then_signalled_again(cleaned: list[str]) -> None:
    with interrupts.interruptible():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the handler raises out of this sleep
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # nox's follow-up: must not cut the clean-up short
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            cleaned.append("cleaned up")


def test_the_first_sigterm_interrupts_and_later_ones_are_ignored() -> None:
    before = {signum: signal.getsignal(signum) for signum in interrupts.STOP_SIGNALS}
    cleaned: list[str] = []
    with pytest.raises(interrupts.Interrupted) as err:
        interrupted_then_signalled_again(cleaned)
    assert cleaned == ["cleaned up"]
    assert (err.value.signum, err.value.name, err.value.exit_code) == (signal.SIGTERM, "SIGTERM", 143)
    assert str(err.value) == "interrupted by SIGTERM"
    assert {signum: signal.getsignal(signum) for signum in interrupts.STOP_SIGNALS} == before


def sigint_in_sleep() -> None:
    with interrupts.interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)


def test_sigint_is_interrupted_too_not_keyboard_interrupt() -> None:
    with pytest.raises(interrupts.Interrupted) as err:
        sigint_in_sleep()
    assert (err.value.name, err.value.exit_code) == ("SIGINT", 130)


def sigterm_while_deferred(reached: list[str]) -> None:
    with interrupts.interruptible():
        with interrupts.signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            reached.append("end of the deferred block")
        reached.append("after it")  # never: the signal lands as the block ends


def test_signals_wait_while_deferred() -> None:
    reached: list[str] = []
    with pytest.raises(interrupts.Interrupted):
        sigterm_while_deferred(reached)
    assert reached == ["end of the deferred block"]




def sigterm_while_deferred_taken_by_another_thread(reached: list[str]) -> None:
    """As under pytest-xdist: a thread started before the block does not block the signal, so the
    kernel may hand it to that thread; the handler must still wait for the block's end."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    assert other.ident is not None  # started
    try:
        with interrupts.interruptible():
            with interrupts.signals_deferred():
                signal.pthread_kill(other.ident, signal.SIGTERM)
                time.sleep(0.05)
                reached.append("end of the deferred block")
            reached.append("after it")
    finally:
        stop.set()
        other.join()


def test_a_signal_another_thread_takes_still_waits_for_the_deferred_block() -> None:
    reached: list[str] = []
    with pytest.raises(interrupts.Interrupted):
        sigterm_while_deferred_taken_by_another_thread(reached)
    assert reached == ["end of the deferred block"]
