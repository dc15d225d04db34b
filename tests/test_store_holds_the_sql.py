"""Given the service's source tree, expect every SQL statement in ``service/store/``: no module
elsewhere under ``scheduler/service/`` builds a statement (SQLAlchemy's ``select``, ``insert``,
``update``, ``delete``, ``text``, ``func``, a ``Table`` ...), runs one (``.execute(``,
``.exec_driver_sql(``, ``.executemany(``, ``.scalars(`` on a connection) or holds one as a
string (``"SELECT ... FROM"``).

The check reads each module's syntax tree, not its text: a docstring or comment that says
``select(`` is no SQL, and an aliased import (``import sqlalchemy as sa; sa.select(...)``) is.
Each rule is first shown to catch the attack it is for, on a small module written here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TypeGuard

import pytest
from import_graph import ROOT

SERVICE = ROOT / "scheduler" / "service"
STORE = SERVICE / "store"

#: What SQLAlchemy builds statements and schema with. The types a caller passes around
#: (``Connection``, ``Engine``, ``Row``) and the errors it catches (``exc``) are not SQL.
_BUILDER_NAMES = """select insert update delete text func case or_ and_ not_ bindparam literal
exists literal_column column table Table Column union union_all join outerjoin cast tuple_ null
true false sql MetaData Index ForeignKey"""
BUILDERS = frozenset(_BUILDER_NAMES.split())
#: Calls that send a statement to the database.
RUNS = frozenset({"execute", "exec_driver_sql", "executemany", "scalars", "scalar_one"})
#: A string that is a statement (upper case, as SQL in this code base is written).
STATEMENT = re.compile(
    r"^\s*(SELECT\b.*\bFROM\b|INSERT INTO\b|UPDATE\s+\w+\s+SET\b|DELETE FROM\b|WITH\b.*\bAS\s*\()",
    re.DOTALL,
)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that are docstrings (of the module, a class, a function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _statement(node: ast.AST, docs: set[int]) -> TypeGuard[ast.Constant]:
    """Whether ``node`` is a string constant, not a docstring, that spells out a statement."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    return id(node) not in docs and bool(STATEMENT.match(node.value))


def sql_in(source: str) -> list[str]:
    """Where ``source`` builds, runs or spells out SQL: ``line: what`` each."""
    tree = ast.parse(source)
    found: list[str] = []
    aliases = set()  # names bound to the sqlalchemy module (or its ``sql`` package)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            for a in node.names:
                if a.name in BUILDERS or node.module in ("sqlalchemy.sql", "sqlalchemy.schema"):
                    found.append(f"{node.lineno}: imports {a.name} from {node.module}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "sqlalchemy" or a.name.startswith("sqlalchemy.sql"):
                    aliases.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id in aliases and node.attr in BUILDERS:
                found.append(f"{node.lineno}: {base.id}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in RUNS:
                found.append(f"{node.lineno}: .{node.func.attr}(...)")
        elif _statement(node, docs):
            found.append(f"{node.lineno}: SQL text {ast.literal_eval(node).strip()[:40]!r}")
    return found


# ---- each rule catches its attack ----------------------------------------------------------


@pytest.mark.parametrize(
    "attack",
    [
        "from sqlalchemy import select\nq = select(1)\n",
        "from sqlalchemy import text\nq = text('VACUUM')\n",
        "import sqlalchemy as sa\nq = sa.select(1)\n",
        "from sqlalchemy.sql import expression\n",
        "def f(conn):\n    return conn.execute(q)\n",
        "def f(conn):\n    conn.exec_driver_sql('PRAGMA x')\n",
        "def f(cur):\n    cur.execute(Q)\n",
        "Q = 'SELECT id FROM jobs WHERE state = ?'\n",
        "Q = '''\n  UPDATE jobs SET why = ? WHERE id = ?'''\n",
        "def f():\n    x = 1\n    return 'DELETE FROM tasks'\n",
    ],
)
def test_sql_outside_the_store_is_seen(attack: str) -> None:
    assert sql_in(attack), f"not caught:\n{attack}"


def test_words_about_sql_are_not_sql() -> None:
    prose = (
        '"""Reads with select(jobs) and conn.execute(...): SELECT id FROM jobs."""\n'
        "# conn.execute(select(jobs))\n"
        "from sqlalchemy import exc\nfrom sqlalchemy.engine import Connection\n"
        "def f(conn: Connection) -> None:\n"
        '    """UPDATE jobs SET why = 1 is the store\'s."""\n'
        "    print('select a job; update the view')\n"
    )
    assert sql_in(prose) == []


# ---- the tree ------------------------------------------------------------------------------


def service_modules() -> list[Path]:
    return sorted(p for p in SERVICE.rglob("*.py") if STORE not in p.parents)


def test_no_module_outside_the_store_holds_sql() -> None:
    modules = service_modules()
    assert len(modules) > 50, "the service's modules were not found"
    found = {
        str(p.relative_to(ROOT)): hits
        for p in modules
        if (hits := sql_in(p.read_text(encoding="utf-8")))
    }
    assert found == {}, "SQL outside service/store/: move it into a named store query"


def test_the_store_is_where_the_sql_went() -> None:
    """The check above is not passing on an empty tree: the store holds the statements."""
    in_store = [hit for p in STORE.rglob("*.py") for hit in sql_in(p.read_text(encoding="utf-8"))]
    assert len(in_store) > 100
