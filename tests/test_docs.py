"""The manual (docs/, Sphinx) builds with every warning an error, as CI builds it; its
generated references hold every benchmark, option, kernel, suite and command the code
has; and README's links land on pages that exist."""
import importlib.util
import re
import shlex
import shutil
import subprocess
import sys

import click
import pytest

from cxlbench import benchmarks, cli, suite

from . import manual
from .conftest import cxlbench

pytest.importorskip("sphinx", reason="the docs extra is not installed: "
                                     "pip install -e '.[test,docs]'")


def reference():
    """docs/_ext/cxlbench_reference.py, the extension that makes the generated pages."""
    spec = importlib.util.spec_from_file_location(
        "cxlbench_reference", manual.REPO / "docs" / "_ext" / "cxlbench_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                        "html", str(manual.REPO / "docs"), str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr[-5000:]
    return out


def test_every_page_is_built_and_the_front_page_leads_to_getting_started(site):
    pages = {p.relative_to(manual.REPO / "docs").with_suffix(".html")
             for p in (manual.REPO / "docs").rglob("*.md") if "_build" not in p.parts}
    assert pages and all((site / p).is_file() for p in pages)
    assert 'href="getting-started.html"' in (site / "index.html").read_text()


def test_the_benchmark_reference_has_every_benchmark_option_kernel_and_suite(site):
    html = (site / "reference" / "benchmarks.html").read_text()
    for name, b in benchmarks.available().items():
        section = html.split(f'id="{name.replace("_", "-")}"', 1)
        assert len(section) == 2, f"{name} has no section"
        body = section[1].split("<section", 1)[0]
        assert "What it measures: " in body, f"{name} says not what it measures"
        for option in b.options:
            assert f"<code class=\"docutils literal notranslate\"><span class=\"pre\">" \
                   f"{option}</span></code>" in body, (name, option)
    values = re.findall(r'<tr class="row-(?:odd|even)"><td><p><code[^>]*><span class="pre">'
                        r'(\w+)</span></code></p></td>\n<td><p>(.*?)</p></td>', html)
    assert len(values) > 100 and all(v.strip() for _, v in values), "an option without values"
    assert ("page", "4k|thp|2m|1g") in values
    for kernel in ("chase", "copy_nt", "triad"):
        assert f"Kernel <code class=\"docutils literal notranslate\"><span class=\"pre\">" \
               f"{kernel}</span></code>" in html
    for name in suite.shipped_names():
        assert f"<span class=\"pre\">{name}</span></code></strong>" in html, name


def test_the_cli_reference_has_every_command_and_option(site):
    """Each command's section, and each of its options under it (sphinx-click's anchors:
    cmdoption-<command path>-<option>), --help and hidden commands aside."""
    html = (site / "reference" / "cli.html").read_text()

    def walk(command, path):
        if command.hidden:
            return
        assert f'id="{"-".join(path)}"' in html, " ".join(path)
        for param in command.params:
            for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
                if opt.startswith("-"):
                    anchor = f'id="cmdoption-{"-".join(path)}-{opt.lstrip("-")}"'
                    assert anchor in html, (" ".join(path), opt)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, path + [name])
    walk(cli.main, ["cxlbench"])


def test_readmes_links_land_on_files_that_exist():
    text = (manual.REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert (manual.REPO / link).exists(), link


def test_readme_is_the_front_door():
    """Under 200 lines, the two commands in it, the manual named as where to read on."""
    text = (manual.REPO / "README.md").read_text()
    assert len(text.splitlines()) < 200
    assert "pip install . && cxlbench run" in text and "tests/run" in text
    assert "docs/getting-started.md" in text


def test_measurements_has_a_row_per_job_of_every_committed_run(site):
    """docs/measurements.md's last table is made from the committed runs as the site is
    built: each run's folder and each of its jobs is there, with the date it started."""
    from cxlbench import results
    html = (site / "measurements.html").read_text()
    committed = sorted({p.parent for pattern in reference().COMMITTED
                        for p in manual.REPO.glob(pattern)})
    assert committed
    for folder in committed:
        where = str(folder.relative_to(manual.REPO))
        meta = results.read_meta(folder)
        assert where in html and meta["started"][:10] in html, where
        for job in results.load(folder)["job"].unique():
            assert f"<td><p>{job} (" in html, job


def manual_commands() -> list[str]:
    """Every `cxlbench ...` command of the code blocks of README and the manual (after a
    `$ ` prompt or an `&&` too), comments cut, continuations joined."""
    found = (re.search(r"(?:^|&& |; )(cxlbench [^;&|]*)", line) for line in manual.code_lines())
    return [m.group(1).strip() for m in found if m]


def test_every_command_the_manual_shows_names_a_command_and_options_it_has():
    """A renamed command or option fails here, on every page, short options and the
    command an emulated guest runs (after `--`) included. `run`, `plan`, `emulate` and
    `fleet` lines are also run as written by their own tests."""
    def check(line, words):
        command, path = cli.main, ["cxlbench"]
        while isinstance(command, click.Group) and words and words[0] in command.commands:
            command = command.commands[words[0]]
            path.append(words.pop(0))
        assert not (isinstance(command, click.Group) and words and
                    not words[0].startswith("-")), f"{line}: no command {words[0]}"
        inner = []
        if "--" in words:               # emulate: the command the guest runs follows
            words, inner = words[:words.index("--")], words[words.index("--") + 1:]
        options = {"--help"} | {o for p in command.params
                                for o in [*getattr(p, "opts", []),
                                          *getattr(p, "secondary_opts", [])]}
        for word in words:
            if re.match(r"-[A-Za-z-]", word):
                assert word.split("=")[0] in options, f"{line}: {' '.join(path)} has no {word}"
        if inner:
            check(line, inner)

    commands = manual_commands()
    assert len(commands) > 40
    for line in commands:
        check(line, shlex.split(line)[1:])


def test_readmes_timings_are_those_measurements_gives():
    """README's table of the two commands' times and measurements.md say the same."""
    readme = (manual.REPO / "README.md").read_text()
    table = readme[readme.index("| command | took |"):].split("\n\n")[0].splitlines()[2:]
    assert len(table) == 3
    measurements = manual.page("measurements.md")
    for row in table:
        took = row.split("|")[2].strip()
        assert f"| {took} |" in measurements, took


def test_getting_starteds_report_step_runs_as_written(tmp_path):
    """Getting started's last step, with a committed run of the quick suite where the page
    has `results/<machine>/<run>`: the report it names is made, headline first."""
    (line,) = [c for c in manual_commands() if c.startswith("cxlbench report results/<")
               and c in manual.page("getting-started.md")]
    run = manual.REPO / "tests/data/first-look/vm/20261202-073449"
    shutil.copytree(run, tmp_path / "results" / "vm" / run.name)
    args = shlex.split(line.replace("results/<machine>/<run>", f"results/vm/{run.name}"))
    r = cxlbench(*args[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / args[args.index("-o") + 1]
    html = (out / "report.html").read_text()
    assert html.index("Headline") < html.index("Idle latency")


def test_the_benchmarks_pages_table_names_what_the_registry_has():
    """benchmarks.md's table of what each benchmark measures is written by hand: it lists
    every benchmark there is, each `option=value` it shows names an option of that
    benchmark (or a buffer's mem./page.), and a default it quotes is the option's."""
    from cxlbench.benchmarks import available
    rows = [line for line in manual.page("benchmarks.md").splitlines()
            if re.match(r"\| `\w+` \|", line)]
    named = [re.match(r"\| `(\w+)`", row).group(1) for row in rows]
    assert sorted(named) == sorted(available())
    for name, row in zip(named, rows):
        options = available()[name].options
        shown = row.rsplit(" | ", 1)[-1]
        for option in re.findall(r"`([a-z_]+(?:\.[a-z_]+)?)=", shown):
            assert option in options or (option.split(".")[0] in ("mem", "page") and
                                         "mem" in options), (name, option)
        for option, value in re.findall(r"`([a-z_]+)` \(default `?([^,;)`]+)", row):
            assert options[option].default_text() == value, (name, option, value)
