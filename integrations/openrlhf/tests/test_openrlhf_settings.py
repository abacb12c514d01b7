"""FACTUTIL_* settings and labels: validated by FactUtilConfig, errors name the variable."""

from __future__ import annotations

import pytest
from factutil_openrlhf import SettingsError, config_from_env, golden_answers_from_label


def test_each_config_field_has_its_variable():
    config = config_from_env(
        {"FACTUTIL_OMEGA": "0.3", "FACTUTIL_MODE": "exact", "FACTUTIL_NORM_BY_STD": "false",
         "FACTUTIL_GROUP_SIZE": "null", "PATH": "/bin", "FACTUTIL_OPENRLHF_ANYTHING": "x"}
    )
    assert (config.omega, config.mode, config.norm_by_std, config.group_size) == (0.3, "exact", False, None)
    assert config_from_env({}, mode="exact").omega == 0.5
    assert config_from_env({"FACTUTIL_OMEGA": "0.3"}, omega=0.0).omega == 0.0


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"FACTUTIL_OMEGA": "-1"}, "FACTUTIL_OMEGA='-1': omega: Input should be greater than or equal to 0"),
        ({"FACTUTIL_OMEGA": "lots"}, "FACTUTIL_OMEGA='lots': omega"),
        ({"FACTUTIL_MODE": "fuzzy"}, "FACTUTIL_MODE='fuzzy': mode"),
        ({"FACTUTIL_OMEGAA": "0.3"},
         "FACTUTIL_OMEGAA: no factutil setting 'omegaa' (did you mean FACTUTIL_OMEGA?)"),
        ({"FACTUTIL_QWERTY": "1"}, ("FACTUTIL_QWERTY: no factutil setting 'qwerty'; known: "
                                   "FACTUTIL_ALPHA, ")),
        ({"FACTUTIL_EPSILON": "nan"}, "FACTUTIL_EPSILON='nan': epsilon"),
    ],
)
def test_bad_settings_name_the_variable(environ, message):
    with pytest.raises(SettingsError) as error:
        config_from_env(environ)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("label", "golds"),
    [
        ('["Paris", "paris, France"]', ["Paris", "paris, France"]),
        ("Paris", ["Paris"]),
        ("[not json", ["[not json"]),
        (["A", " ", None, 3], ["A", "3"]),
        ({"target": ["x"]}, ["x"]),
        ({"golden_answers": "y"}, ["y"]),
        # Search-R1's parquet: --data.label_key reward_model
        ({"style": "rule", "ground_truth": {"target": ["Paris", "paris"]}}, ["Paris", "paris"]),
        (1990, ["1990"]),
        ("", []),
        (None, []),
    ],
)
def test_golden_answers_from_label(label, golds):
    assert golden_answers_from_label(label) == golds


@pytest.mark.parametrize("text", ["[paper]", "{a: 1}", "[[1], 2]"])
def test_every_variable_of_a_wrong_type_is_one_line_naming_it(text):
    """``FACTUTIL_<FIELD>`` holding a YAML list or mapping, for every field -> SettingsError
    whose lines all name the variable; never a TypeError."""
    from factutil import FactUtilConfig

    for field in FactUtilConfig.model_fields:
        variable = f"FACTUTIL_{field.upper()}"
        with pytest.raises(SettingsError) as caught:
            config_from_env({variable: text})
        lines = str(caught.value).splitlines()
        assert lines and all(line.startswith(f"{variable}={text!r}: {field}") for line in lines)


def test_the_librarys_cache_folder_is_no_setting():
    """FACTUTIL_CACHE (where the static vectors live) is the library's, not a config field: a
    run that sets it builds its config as without it; FACTUTIL_CACHE_MAX_BYTES still is one."""
    config = config_from_env({"FACTUTIL_CACHE": "/tmp/x", "FACTUTIL_CACHE_MAX_BYTES": "1024"})
    assert config.cache_max_bytes == 1024
