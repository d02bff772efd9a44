"""Settings: defaults (each written once), the TOML file, environment overrides, durations
as timedeltas from their ``*_seconds`` keys, and one-line errors naming the key, for the
rules of single fields and between fields (the Kaniko options' included)."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta
from pathlib import Path

import pytest

from releasebot.builders.kaniko import DEFAULT_EXECUTOR_IMAGE, KanikoOptions
from releasebot.builders.recipe import CONFIGMAP_NAME
from releasebot.config import (
    BuildSettings,
    DatabaseSettings,
    FlatcarSettings,
    HttpSettings,
    KanikoSettings,
    KubernetesSettings,
    NvidiaSettings,
    RecipeSettings,
    RegistrySettings,
    RunSettings,
    SlackSettings,
    load_settings,
    redact_url,
)
from releasebot.domain.shared.errors import ConfigError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.lifecycle import LifecycleRules
from releasebot.edge.retry import RetryPolicy

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "releasebot.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file() -> None:
    settings = load_settings(None, environ={})
    assert settings.database.url == "sqlite:///releasebot.db"
    assert settings.flatcar.channels == ("stable", "lts")
    assert settings.nvidia.branches == ("580",)
    assert settings.policy().flatcar.arches == frozenset({Arch.AMD64})
    assert settings.flatcar_feed_url("lts-2024").endswith("/releases-lts-2024.json")


def test_the_example_file_loads_and_matches_the_defaults() -> None:
    example = load_settings(REPO / "config" / "releasebot.example.toml", environ={})
    assert example == load_settings(None, environ={})


def test_file_values_and_environment_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [flatcar]
        channels = ["beta", "lts-2024"]
        keep = 3
        [nvidia]
        branches = [580, "595"]
        branch_types = ["LTS Branch"]
        """,
    )
    settings = load_settings(
        path,
        environ={
            "RELEASEBOT_FLATCAR_ARCHES": "amd64, arm64",
            "RELEASEBOT_NVIDIA_KEEP": "2",
            "RELEASEBOT_DATABASE_URL": "postgresql://bot:s3cret@db/releasebot",
            "UNRELATED": "x",
        },
    )
    assert settings.flatcar.channels == ("beta", "lts-2024")
    assert settings.flatcar.keep == 3
    assert settings.flatcar.arches == ("amd64", "arm64")
    assert settings.nvidia.branches == ("580", "595")
    assert settings.nvidia.branch_types == ("lts branch",)
    assert settings.nvidia.keep == 2
    assert settings.database.url == "postgresql+psycopg://bot:s3cret@db/releasebot"
    assert "s3cret" not in repr(settings)


def test_config_path_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[flatcar]\nkeep = 5\n")
    assert load_settings(None, environ={"RELEASEBOT_CONFIG": str(path)}).flatcar.keep == 5


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("[flatcar]\nchanels = []\n", "flatcar.chanels", "unknown key"),
        ("[flatcr]\n", "flatcr", "unknown section"),
        (
            '[flatcar]\nchannels = ["stable", "edge"]\n',
            "flatcar.channels",
            "'edge' is not a channel",
        ),
        ("[flatcar]\nchannels = []\n", "flatcar.channels", "at least one"),
        ('[flatcar]\nchannels = "stable"\n', "flatcar.channels", "must be a list"),
        ('[flatcar]\narches = ["x86_64"]\n', "flatcar.arches", "not an arch"),
        ("[flatcar]\nkeep = 0\n", "flatcar.keep", "between 1 and 100"),
        ('[flatcar]\nkeep = "2"\n', "flatcar.keep", "must be int"),
        ("[flatcar]\nkeep = true\n", "flatcar.keep", "must be int"),
        ('[flatcar]\nfeed_url = "ftp://x/{channel}"\n', "flatcar.feed_url", "http://"),
        ('[flatcar]\nfeed_url = "https:///x/{channel}"\n', "flatcar.feed_url", "no host"),
        ('[flatcar]\nfeed_url = "https://x/{chanel}.json"\n', "flatcar.feed_url", "placeholder"),
        ('[flatcar]\nfeed_url = "https://x/stable.json"\n', "flatcar.feed_url", "{channel}"),
        ('[nvidia]\nbranches = ["r580"]\n', "nvidia.branches", "not a driver branch"),
        ('[nvidia]\nbranch_types = ["lts"]\n', "nvidia.branch_types", "is not one of"),
        ("[nvidia]\nbranches = []\n", "nvidia.branches", "at least one"),
        ('[nvidia]\nincompatible = ["550.*"]\n', "nvidia.incompatible", "is not DRIVER:KERNEL"),
        ('[nvidia]\nincompatible = ["550.*:6.12 97"]\n', "nvidia.incompatible", "DRIVER:KERNEL"),
        ('[nvidia]\nincompatible = [":6.12.97"]\n', "nvidia.incompatible", "DRIVER:KERNEL"),
        ('[nvidia]\nincompatible = ["5²0.*:6.12"]\n', "nvidia.incompatible", "DRIVER:KERNEL"),
        ('[database]\nurl = "mysql://x/y"\n', "database.url", "sqlite"),
        ('[registry]\nrepository = "Registry/UPPER"\n', "registry.repository", "repository"),
        ("[http]\ntimeout_seconds = -1\n", "http.timeout_seconds", "between 0 and 3600"),
        ("[http]\ntimeout_seconds = nan\n", "http.timeout_seconds", "between 0 and 3600"),
        ("[http]\ntimeout_seconds = inf\n", "http.timeout_seconds", "between 0 and 3600"),
        ('[http]\nuser_agent = "bot é"\n', "http.user_agent", "printable ASCII"),
        ("[flatcar]\nchannels = [1.5]\n", "flatcar.channels", "list of strings"),
        ('[flatcar]\nchannels = [["stable"]]\n', "flatcar.channels", "list of strings"),
        ("[flatcar]\narches = [{a = 1}]\n", "flatcar.arches", "list of strings"),
        ('[flatcar]\nfeed_url = "http://[::1/x"\n', "flatcar.feed_url", "not a valid URL"),
        ('[nvidia]\nfeed_url = "https://u:pw@h:abc/x"\n', "nvidia.feed_url", "not a valid URL"),
        ('[database]\nurl = "postgresql://u:pw@h:abc/db"\n', "database.url", "not a valid URL"),
        ('[kaniko]\nmemory_limit = "lots"\n', "kaniko.memory_limit", "quantity"),
        ('[kaniko]\ncontext = "https://x/y"\n', "kaniko.context", "git://"),
        ('[kaniko]\ncontext_sub_path = "../up"\n', "kaniko.context_sub_path", "relative"),
        ('[kaniko]\nexecutor_image = "kaniko"\n', "kaniko.executor_image", "tag or digest"),
        ("[build]\nmax_concurrent_builds = 0\n", "build.max_concurrent_builds", "between"),
        ('[kubernetes]\nnamespace = "Bad_NS"\n', "kubernetes.namespace", "Kubernetes name"),
        ('[registry]\npassword = "x"\n', "registry.username", "needed"),
        ('[http]\nca_bundle = "/nonexistent/ca.pem"\n', "http.ca_bundle", "not found"),
        ('[recipe]\nmodule_types = "all"\n', "recipe.module_types", "proprietary, open, both"),
        ('[fleet]\nnode_selector = "gpu in (a"\n', "fleet.node_selector", "not a label selector"),
        ("[fleet]\npage_size = 1\n", "fleet.page_size", "between 10 and 5000"),
        ('[fleet]\ngate_annotation = "no spaces"\n', "fleet.gate_annotation", "annotation"),
        (
            '[fleet]\ngate_annotation = "flatcar-linux-update.v1.flatcar-linux.net/x"\n',
            "fleet.gate_annotation",
            "not releasebot's",
        ),
        ("[fleet]\ngate_requires_proof = true\n", "fleet.gate_requires_proof", "needs fleet.gate"),
        (
            '[fleet]\nproof = true\nproof_annotation = "releasebot.io/driver-image-ready"\n',
            "fleet.proof_annotation",
            "must differ",
        ),
        ("[fleet]\nproof_deadline_seconds = 10\n", "fleet.proof_deadline_seconds", "between"),
        ('[fleet]\noperator_namespace = "GPU_Operator"\n', "fleet.operator_namespace", "name"),
        ('[web]\nallowed_hosts = "a.example"\n', "web.allowed_hosts", "must be a list"),
        ('[web]\nallowed_hosts = ["a.example:443"]\n', "web.allowed_hosts", "no scheme, port"),
        ('[web]\nallowed_hosts = ["https://a.example"]\n', "web.allowed_hosts", "not a host"),
        ('[web]\nallowed_hosts = ["*.a.example"]\n', "web.allowed_hosts", "not a host"),
        ('[web]\nallowed_hosts = ["a..example"]\n', "web.allowed_hosts", "not a host"),
        ('[web]\nallowed_hosts = ["\\u00e9.example"]\n', "web.allowed_hosts", "not a host"),
        ("flatcar = 1\n", "flatcar", "[table]"),
        ("[flatcar\n", "--config", "not valid TOML"),
    ],
)
def test_bad_files_name_the_key(tmp_path: Path, text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), environ={})
    assert caught.value.key == key
    assert problem in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"RELEASEBOT_FLATCAR_KEEP": "two"}, "RELEASEBOT_FLATCAR_KEEP"),
        ({"RELEASEBOT_FLATCAR_CHANNELZ": "stable"}, "RELEASEBOT_FLATCAR_CHANNELZ"),
        ({"RELEASEBOT_NOPE_X": "1"}, "RELEASEBOT_NOPE_X"),
        ({"RELEASEBOT_FLATCAR_CHANNELS": ""}, "RELEASEBOT_FLATCAR_CHANNELS"),
        ({"RELEASEBOT_HTTP_TIMEOUT_SECONDS": "nan"}, "RELEASEBOT_HTTP_TIMEOUT_SECONDS"),
        ({"RELEASEBOT_HTTP_TIMEOUT_SECONDS": "1e400"}, "RELEASEBOT_HTTP_TIMEOUT_SECONDS"),
        ({"RELEASEBOT_REGISTRY_INSECURE": "maybe"}, "RELEASEBOT_REGISTRY_INSECURE"),
    ],
)
def test_bad_environment_names_the_key(environ: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, environ=environ)
    assert caught.value.key == key


def test_kubernetes_service_links_are_not_settings() -> None:
    environ = {
        "RELEASEBOT_SERVICE_HOST": "10.0.0.1",
        "RELEASEBOT_PORT": "tcp://10.0.0.1:8080",
        "RELEASEBOT_PORT_8080_TCP_ADDR": "10.0.0.1",
    }
    assert load_settings(None, environ=environ) == load_settings(None, environ={})


def test_the_fleet_section_from_file_and_environment(tmp_path: Path) -> None:
    text = '[fleet]\nenabled = true\nnode_selector = "nvidia.com/gpu.present=true,!spot"\n'
    settings = load_settings(write(tmp_path, text), environ={"RELEASEBOT_FLEET_GATE": "true"})
    fleet = settings.fleet
    assert (fleet.enabled, fleet.gate, fleet.page_size) == (True, True, 500)
    assert fleet.gate_annotation == "releasebot.io/driver-image-ready"
    assert fleet.selector.matches({"nvidia.com/gpu.present": "true"})
    assert not fleet.selector.matches({"nvidia.com/gpu.present": "true", "spot": ""})
    assert load_settings(None, environ={}).fleet.enabled is False


def test_allowed_hosts_are_kept_canonical_from_file_and_environment(tmp_path: Path) -> None:
    text = '[web]\nallowed_hosts = ["Releasebot.Acme.Example.", "10.0.0.7", "::1"]\n'
    settings = load_settings(write(tmp_path, text), environ={})
    assert settings.web.allowed_hosts == ("releasebot.acme.example", "10.0.0.7", "::1")
    environ = {"RELEASEBOT_WEB_ALLOWED_HOSTS": "a.example,B.example"}
    assert load_settings(None, environ=environ).web.allowed_hosts == ("a.example", "b.example")
    assert load_settings(None, environ={}).web.allowed_hosts == ()


def test_env_booleans() -> None:
    settings = load_settings(None, environ={"RELEASEBOT_REGISTRY_INSECURE": "yes"})
    assert settings.registry.insecure is True


def test_a_ca_bundle_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, f'[http]\nca_bundle = "{bogus}"\n'), environ={})
    assert caught.value.key == "http.ca_bundle"


def test_secrets_stay_out_of_repr_and_errors(tmp_path: Path) -> None:
    settings = load_settings(
        None,
        environ={
            "RELEASEBOT_REGISTRY_USERNAME": "bot",
            "RELEASEBOT_REGISTRY_PASSWORD": "hunter2",
        },
    )
    assert settings.registry.password == "hunter2"
    assert "hunter2" not in repr(settings)
    with pytest.raises(ConfigError) as caught:
        load_settings(
            write(tmp_path, '[flatcar]\nfeed_url = "ftp://u:hunter2@x/{channel}"\n'), environ={}
        )
    assert "hunter2" not in str(caught.value)


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "absent.toml", environ={})


def test_redact_url_hides_only_the_password() -> None:
    assert (
        redact_url("postgresql+psycopg://bot:pw@db:5432/x")
        == "postgresql+psycopg://bot:***@db:5432/x"
    )
    assert redact_url("sqlite:///releasebot.db") == "sqlite:///releasebot.db"


def test_durations_are_timedeltas_read_from_their_seconds_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "[run]\ninterval_seconds = 600\n[http]\ntimeout_seconds = 2.5\n")
    settings = load_settings(path, environ={"RELEASEBOT_BUILD_RETRY_BASE_SECONDS": "60"})
    assert settings.run.interval == timedelta(minutes=10)
    assert settings.http.timeout == timedelta(seconds=2.5)
    assert settings.build.retry_base == timedelta(minutes=1)
    assert settings.kaniko.active_deadline == timedelta(hours=1)


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("[run]\ninterval_seconds = 100000000000000000000\n", "run.interval_seconds", "between"),
        ("[run]\ninterval_seconds = 1.5\n", "run.interval_seconds", "must be int"),
        ("[run]\ninterval = 60\n", "run.interval", "unknown key"),  # the key keeps its unit
        ('[kaniko]\nmemory_request = "9Gi"\n', "kaniko.memory_request", "more than"),
        ('[kaniko]\ncontext_sub_path = "driver"\n', "kaniko.context_sub_path", "git context"),
        ('[kaniko]\nregistry_secret = "Push_Creds"\n', "kaniko.registry_secret", "Kubernetes"),
        ("[kaniko]\nactive_deadline_seconds = 30\n", "kaniko.active_deadline_seconds", "60"),
        ("[build]\nretry_cap_seconds = 60\n", "build.retry_cap_seconds", "less than"),
        ("[recipe]\nbases = false\n", "recipe.bases", "set recipe.bases = true, or point"),
    ],
)
def test_rules_between_fields_and_of_durations_name_the_key(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), environ={})
    assert caught.value.key == key
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        '[kaniko]\ncontext = "git://git.example/recipe.git#refs/heads/main#' + "a" * 40 + '"\n',
        '[kaniko]\ncontext_configmap = "my-recipe"\n',
    ],
    ids=["git context", "another ConfigMap"],
)
def test_bases_may_be_off_for_a_recipe_of_ones_own(tmp_path: Path, text: str) -> None:
    settings = load_settings(write(tmp_path, f"{text}[recipe]\nbases = false\n"), environ={})
    assert settings.recipe.bases is False


def test_bases_are_on_by_default_for_the_shipped_recipe() -> None:
    settings = load_settings(None, environ={})
    assert settings.recipe.bases is True
    assert settings.kaniko.context_configmap == CONFIGMAP_NAME


def test_each_default_is_written_once() -> None:
    settings = load_settings(None, environ={})
    assert settings.kaniko.executor_image == DEFAULT_EXECUTOR_IMAGE
    assert settings.kaniko_options() == KanikoOptions(
        namespace="releasebot",
        registry_repository="registry.example.com/nvidia/driver",
        registry_secret="releasebot-registry",
        context_configmap=CONFIGMAP_NAME,
    )
    assert settings.lifecycle_rules() == LifecycleRules()
    assert (settings.http.retries, settings.registry.retries) == (RetryPolicy.retries,) * 2


def test_every_setting_declares_its_rule_beside_it() -> None:
    # A field made with `setting` carries its rule and key in its metadata; a plain field
    # would be a setting whose rule lives somewhere else.
    for section in (
        DatabaseSettings,
        FlatcarSettings,
        NvidiaSettings,
        RegistrySettings,
        HttpSettings,
        KubernetesSettings,
        KanikoSettings,
        BuildSettings,
        SlackSettings,
        RecipeSettings,
        RunSettings,
    ):
        for spec in fields(section):
            assert "check" in spec.metadata, f"{section.__name__}.{spec.name}"
            if isinstance(spec.default, timedelta):
                assert "_seconds" in str(spec.metadata["key"]), spec.name  # the unit, as documented
