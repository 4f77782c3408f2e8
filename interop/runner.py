"""Run a scenario against the reference RabbitMQ and the broker under test, normalise, compare."""

from __future__ import annotations

import difflib
import json
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from interop.normalise import normalise
from interop.registry import Scenario


@dataclass
class Outcome:
    scenario: Scenario
    reference: Any
    target: Any
    agree: bool
    message: str
    seconds: float


def run_once(sc: Scenario, url: str) -> Any:
    """The scenario's observation on one broker; a hang or a crash of the scenario is an observation too,
    so a broker that hangs fails in `sc.timeout` seconds instead of hanging the suite."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["obs"] = sc.fn(url)
        except BaseException as e:  # noqa: BLE001 — recorded as what the client saw
            box["obs"] = {"scenario_raised": type(e).__name__, "text": str(e)[:300]}
            box["tb"] = traceback.format_exc()

    t = threading.Thread(target=target, name=f"interop:{sc.id}", daemon=True)
    t.start()
    t.join(sc.timeout)
    if t.is_alive():
        return {"scenario_hung": f"no result within {sc.timeout:g}s"}
    return normalise(box["obs"])


def run_pair(sc: Scenario, reference_url: str, target_url: str, same_broker: bool = False) -> Outcome:
    """`same_broker`: the target is the reference itself, so even documented differences must not show."""
    t0 = time.monotonic()
    ref = run_once(sc, reference_url)
    tgt = run_once(sc, target_url)
    broken = scenario_failure(ref)
    if broken is not None:
        # What RabbitMQ shows is the reference only if the scenario ran to the end there: a scenario that
        # raises or hangs on RabbitMQ is broken, whatever the target does.
        return Outcome(sc, ref, tgt, False, f"the scenario itself failed on RabbitMQ: {broken}", time.monotonic() - t0)
    if sc.compare is not None and not same_broker:
        msg = sc.compare(ref, tgt)
        agree = msg is None
    else:
        agree = ref == tgt
        msg = None if agree else diff(ref, tgt)
    return Outcome(sc, ref, tgt, agree, msg or "", time.monotonic() - t0)


# Keys by which an observation says the scenario broke rather than observed: the runner's own, Node's
# (scenarios.js raised, or node exited without a result) and Celery's (a result that never came).
FAILURE_KEYS = ("scenario_raised", "scenario_hung", "node_raised", "node_failed", "celery_failed")


def scenario_failure(obs: Any) -> str | None:
    """Why an observation is no observation (the scenario raised, hung or crashed anywhere in it), or None."""
    if _has_failure(obs):
        return dump(obs)
    return None


def _has_failure(obs: Any) -> bool:
    if isinstance(obs, dict):
        return any(k in obs for k in FAILURE_KEYS) or any(_has_failure(v) for v in obs.values())
    if isinstance(obs, list):
        return any(_has_failure(v) for v in obs)
    return False


def dump(obs: Any) -> str:
    return json.dumps(obs, indent=1, sort_keys=True, ensure_ascii=False, default=repr)


def diff(ref: Any, tgt: Any) -> str:
    lines = difflib.unified_diff(
        dump(ref).splitlines(), dump(tgt).splitlines(), "RabbitMQ (reference)", "target", lineterm="", n=2
    )
    return "\n".join(lines)
