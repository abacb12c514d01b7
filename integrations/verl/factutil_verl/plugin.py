"""verl plugin entry point (group ``verl.plugins``, name ``factutil``).

verl imports every ``verl.plugins`` entry point while ``import verl`` runs, in every Ray process,
and swallows a failing import at DEBUG level; ``python -m factutil_verl check`` shows the reason.
Importing this module registers the ``factagent`` agent loop and the ``factutil`` trainer mode.
Without the entry point (verl started with ``VERL_USE_EXTERNAL_PLUGINS=none``, or the package not
installed in the workers' environment), set ``VERL_USE_EXTERNAL_MODULES=factutil_verl``.
"""

# Plain ``import`` (not ``from ... import``): it tolerates the partly-initialised modules of a
# circular start (``import factutil_verl`` -> ``import verl`` -> this plugin).
import factutil_verl.agent_loop  # registers the "factagent" agent loop
import factutil_verl.trainer  # noqa: F401  registers the "factutil" trainer mode
