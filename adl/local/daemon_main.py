"""``python -m adl.local.daemon_main --home DIR --slots N``: the local daemon as a process (its
options, the state directory made private, the policy from the registry, signals). Usually
started by ``adl local up`` or on demand by the CLI; the loop itself is
:class:`adl.local.daemon.Daemon`."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path

from adl.controller.lifecycle import Timing
from adl.local.daemon import Daemon, DaemonRunning
from adl.local.gpus import detect_gpu_types, detect_gpus, visible_gpus
from adl.local.private import make_private_home, private_umask
from adl.local.settings import Settings
from adl.local.store import StateUnreadable, default_home
from adl.sched import registry
from adl.sched.policy_knobs import parse_knobs

log = logging.getLogger("adl.local")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="adl-local-daemon",
        description="The adl local daemon: this machine as a one-node cluster.",
    )
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--slots", type=int, default=None, help="CPU slots when no GPU")
    parser.add_argument("--gpus", type=int, default=None, help="override GPU detection")
    parser.add_argument("--round-s", type=float, default=5.0)
    parser.add_argument("--tick-s", type=float, default=0.2)
    parser.add_argument("--backoff-s", type=float, default=None, help="failure backoff base")
    parser.add_argument(
        "--policy",
        default="adl",
        help="a policy by name (adl, or a baseline: "
        f"{', '.join(n for n in registry.names() if n != 'adl')}) or module:Class of one's own",
    )
    parser.add_argument(
        "--policy-knob",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an adl policy constant, e.g. srpt_power=0.25 (repeatable; the adl policy only)",
    )
    parser.add_argument(
        "--no-prewarm", action="store_true", help="start every group from a fresh interpreter"
    )
    args = parser.parse_args(argv)
    # first: everything the daemon, its shims and their workers create under the home (the
    # database and its WAL with every token, plans with the jobs' environments, logs,
    # checkpoints) is the user's alone
    private_umask()
    try:
        knobs = parse_knobs(args.policy_knob)
    except ValueError as err:
        parser.error(str(err))
    try:  # the same registry as the operator's and the simulator's
        factory = registry.policy_factory(args.policy, knobs=knobs)
    except (ValueError, ImportError, AttributeError) as err:
        parser.error(f"--policy {args.policy}: {err}")
    visible = visible_gpus()
    if args.gpus and args.slots is None and visible is not None and args.gpus > len(visible):
        parser.error(f"--gpus {args.gpus}, but CUDA_VISIBLE_DEVICES lists {len(visible)} GPUs")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    home = args.home or default_home()
    try:
        make_private_home(home)
    except OSError as err:
        raise SystemExit(f"adl daemon: cannot use {home} as the state directory: {err}") from None
    gpus = detect_gpus() if args.gpus is None else args.gpus
    timing = Timing() if args.backoff_s is None else Timing(backoff_base_s=args.backoff_s)
    settings = Settings(
        home=home,
        slots=args.slots or (gpus or 4),
        gpus=gpus if args.slots is None else 0,
        round_s=args.round_s,
        tick_s=args.tick_s,
        timing=timing,
        prewarm=not args.no_prewarm,
        gpu_types=tuple(detect_gpu_types(gpus)) if gpus and args.slots is None else (),
    )
    # the state directory, for whatever the daemon starts (and a policy of one's own) to find
    os.environ["ADL_HOME"] = str(home)
    log.info("scheduling policy: %s", args.policy)
    if knobs:
        log.info("adl policy knobs: %s", knobs)
    try:
        daemon = Daemon(settings, factory)
    except StateUnreadable as err:
        raise SystemExit(f"adl daemon: {err}") from None
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    signal.signal(signal.SIGINT, lambda *_: daemon.stop())
    try:
        daemon.run()
    except DaemonRunning as err:
        raise SystemExit(f"adl daemon: {err}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
