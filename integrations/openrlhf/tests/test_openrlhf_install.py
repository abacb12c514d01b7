"""install(): standard library only at import; patches through a post-import hook (fresh process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FACTUTIL_")}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False, capture_output=True, text=True, timeout=120, env=environ, cwd=TESTS,
    )


def test_import_and_install_load_only_the_standard_library_and_wrapt():
    result = run_python(
        """
        import sys
        before = set(sys.modules)
        import factutil_openrlhf
        factutil_openrlhf.install()
        factutil_openrlhf.install()
        new = {name.split(".")[0] for name in set(sys.modules) - before}
        foreign = sorted(new - set(sys.stdlib_module_names) - {"factutil_openrlhf", "wrapt"})
        assert not foreign, foreign
        from wrapt.importer import _post_import_hooks as hooks  # one waiting hook per target
        from factutil_openrlhf._hook import TARGETS
        assert all(len(hooks[name]) == 1 for name in TARGETS), hooks
        print("OK")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"


@pytest.mark.integration
def test_install_patches_already_imported_and_later_imported_modules():
    pytest.importorskip("openrlhf")
    result = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        from openrlhf_testkit import add_standins
        add_standins()
        import openrlhf.trainer.ppo_utils.samples_generator as samples_generator
        assert "openrlhf.trainer.ppo_utils.experience_maker" not in sys.modules
        import factutil_openrlhf
        factutil_openrlhf.install()  # settings from FACTUTIL_* of this process
        method = samples_generator.SamplesGenerator._process_response_into_experience
        assert getattr(method, "__factutil_patched__", None) is not None, "not patched at install"
        import openrlhf.trainer.ppo_utils.experience_maker as experience_maker
        method = experience_maker.RemoteExperienceMaker.compute_advantages_and_returns
        original = getattr(method, "__factutil_patched__", None)
        assert original is not None, "not patched on import"
        factutil_openrlhf.install()
        again = experience_maker.RemoteExperienceMaker.compute_advantages_and_returns
        assert getattr(again, "__factutil_patched__") is original, "wrapped twice"
        import inspect
        assert "compute_advantages_and_returns" in inspect.getsource(experience_maker)
        from factutil_openrlhf import patch
        print(patch.active().config.omega, patch.active().config.mode)
        """,
        FACTUTIL_OMEGA="0.25", FACTUTIL_MODE="exact",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "0.25 exact"


def test_bad_settings_stop_the_patch_naming_the_variable(openrlhf, monkeypatch):
    from factutil_openrlhf import SettingsError, _hook

    monkeypatch.setenv("FACTUTIL_OMEGA", "-2")
    with pytest.raises(SettingsError, match="FACTUTIL_OMEGA='-2'"):
        _hook.install()
    monkeypatch.delenv("FACTUTIL_OMEGA")
    _hook.install({"mode": "exact"})
