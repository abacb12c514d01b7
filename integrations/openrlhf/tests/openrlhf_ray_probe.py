"""Stands in for openrlhf.cli.train_ppo_ray under the launcher (``--factutil.entry``).

Run as ``__main__`` by ``factutil_openrlhf.train_ppo_ray``: checks, inside a real Ray worker of
the launcher's job, that the setup hook ran, that importing OpenRLHF's experience module there
patches it with the job's FACTUTIL_* settings, and prints the findings as one JSON line.
"""

import json
import sys
from pathlib import Path

import ray

TESTS = str(Path(__file__).resolve().parent)


@ray.remote(num_cpus=0)
def probe():
    import os
    import sys

    from factutil_openrlhf._hook import TARGETS
    from wrapt.importer import _post_import_hooks

    hooked = all(_post_import_hooks.get(name) for name in TARGETS)
    sys.path.insert(0, TESTS)
    from openrlhf_testkit import add_standins

    add_standins()
    from factutil_openrlhf import patch
    from openrlhf.trainer.ppo_utils import experience_maker

    method = experience_maker.RemoteExperienceMaker.compute_advantages_and_returns
    return {
        "hooked": hooked,
        "patched": getattr(method, patch.PATCHED, None) is not None,
        "omega": patch.active().config.omega,
        "extra_env": os.environ.get("FACTAGENT_PROBE"),
    }


if __name__ == "__main__":
    found = ray.get(probe.remote())
    found["argv"] = sys.argv[1:]
    found["driver_ray_initialized"] = ray.is_initialized()
    print("PROBE " + json.dumps(found))
    ray.shutdown()
