"""Jobs owned by an account's number, not by a name (issue 16 item 4).

``accounts`` gets a numeric ``id`` (its key, instead of the name), a ``kind`` (user, admin,
service: a hub user named ``admin`` is not the admin token), the fingerprint of the credential a
users-file user was first seen with, and ``retired_at``: a removed or replaced user's account is
kept, with its jobs and uid, but its name is free for someone new. At most one live account per
(kind, name). ``jobs.owner_id`` references the account; ``jobs.user`` stays as the name shown.

Existing rows: accounts are numbered in the order they were created; every name found on a job
gets its account (created without a uid when it had none) and the job its id.

Revision ID: 0006_owner_ids
Revises: 0005_job_etas
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0006_owner_ids"
down_revision = "0005_job_etas"
branch_labels = None
depends_on = None

LIVE = sa.text("retired_at IS NULL")


def upgrade() -> None:
    conn = op.get_bind()
    old = conn.execute(
        sa.text('SELECT "user", uid, gid, source, created_at FROM accounts ORDER BY created_at')
    ).all()
    op.drop_table("accounts")  # its key changes from the name to a number
    accounts = op.create_table(
        "accounts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("uid", sa.Integer, nullable=True, unique=True),
        sa.Column("gid", sa.Integer, nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("credential", sa.String(64), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("retired_at", sa.Float, nullable=True),
    )
    op.create_index(
        "uq_accounts_live",
        "accounts",
        ["kind", "user"],
        unique=True,
        sqlite_where=LIVE,
        postgresql_where=LIVE,
    )
    rows = [{"kind": kind_of(r.user), **r._asdict()} for r in old]
    if rows:
        op.bulk_insert(accounts, rows)
    op.add_column("jobs", sa.Column("owner_id", sa.Integer, nullable=True))
    op.create_index("ix_jobs_owner", "jobs", ["owner_id"])
    _back_fill(conn)


def kind_of(name: str) -> str:
    """Which kind of identity a name stored before 0006 was: the admin token acted as
    ``admin`` and hub services as ``service:NAME`` (no users-file user may take either)."""
    if name == "admin":
        return "admin"
    return "service" if name.startswith("service:") else "user"


def _back_fill(conn: sa.Connection) -> None:
    known = {r.user for r in conn.execute(sa.text('SELECT "user" FROM accounts'))}
    names = [r.user for r in conn.execute(sa.text('SELECT DISTINCT "user" FROM jobs'))]
    for name in sorted(set(names) - known):
        conn.execute(
            sa.text(
                'INSERT INTO accounts (kind, "user", source, created_at) '
                "VALUES (:kind, :user, 'jobs', :t)"
            ),
            {"kind": kind_of(name), "user": name, "t": time.time()},
        )
    conn.execute(
        sa.text(
            'UPDATE jobs SET owner_id = (SELECT a.id FROM accounts a WHERE a."user" = jobs."user")'
        )
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_owner", "jobs")
    op.drop_column("jobs", "owner_id")
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            'SELECT "user", uid, gid, source, created_at FROM accounts '
            "WHERE retired_at IS NULL AND uid IS NOT NULL"
        )
    ).all()
    op.drop_table("accounts")
    accounts = op.create_table(
        "accounts",
        sa.Column("user", sa.String(128), primary_key=True),
        sa.Column("uid", sa.Integer, nullable=False, unique=True),
        sa.Column("gid", sa.Integer, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    if rows:
        op.bulk_insert(accounts, [r._asdict() for r in rows])
