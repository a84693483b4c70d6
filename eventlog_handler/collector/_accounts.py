"""Organizations, projects and their settings, tokens and users, in the collector's database.

On first use the store creates an organization, a project, a user token (scopes ``user`` and
``client``, bound to no project), a project token (scope ``client``) and a user
(``admin@localhost`` with a random password); all of them are found again in the same database.
The password is kept (hashed for checking, and as issued so ``eventlog serve`` can print it at
every start, like the tokens).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eventlog_handler.collector._database import Database
from eventlog_handler.collector._formats import format_utc, new_object_id, new_token_key, utc_now

__all__ = ["ADMIN_EMAIL", "Accounts", "Identity", "TokenRecord", "UserRecord"]

ADMIN_EMAIL = "admin@localhost"
_HASH_ITERATIONS = 60_000
_IDENTITY_KEYS = ("organization_id", "project_id", "user_token", "project_token")


@dataclass(frozen=True)
class Identity:
    """The organization, project, tokens and user created on first start."""

    organization_id: str
    project_id: str
    user_token: str
    project_token: str
    admin_email: str = ADMIN_EMAIL
    admin_password: str = ""


@dataclass(frozen=True)
class TokenRecord:
    """Who a request acts as: a stored token, or a user who sent e-mail and password."""

    id: str
    organization_id: str
    project_id: str | None
    scopes: tuple[str, ...]
    is_disabled: bool
    expires_ts: float | None
    user_id: str | None = None

    def is_usable(self, now: float) -> bool:
        """Not disabled and not expired."""
        return not self.is_disabled and (self.expires_ts is None or self.expires_ts > now)

    def has_scope(self, scope: str) -> bool:
        """``global`` implies ``user``, which implies ``client``."""
        implied = {"global": {"global", "user", "client"}, "user": {"user", "client"}}
        return any(scope in implied.get(own, {own}) for own in self.scopes)


@dataclass(frozen=True)
class UserRecord:
    """A user of the collector."""

    id: str
    organization_id: str
    email: str
    full_name: str


def clean_text(text: str | None) -> str | None:
    """Text SQLite can store: lone surrogates (valid in JSON strings) become ``?``."""
    if text is None or text.isascii():
        return text
    return text.encode("utf-8", "replace").decode("utf-8")


def dumps(value: Any) -> str:
    """Compact ASCII JSON (non-JSON values as their ``str``)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=str)


def hash_password(password: str, salt: bytes | None = None) -> str:
    """``pbkdf2_sha256$<iterations>$<salt>$<hash>``."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, _HASH_ITERATIONS)
    return f"pbkdf2_sha256${_HASH_ITERATIONS}${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches a :func:`hash_password` value."""
    try:
        scheme, iterations, salt, expected = stored.split("$")
        if scheme != "pbkdf2_sha256":
            return False
        digest = hashlib.pbkdf2_hmac(
            "sha256", password.encode(), bytes.fromhex(salt), int(iterations)
        )
    except (ValueError, UnicodeEncodeError):
        return False
    return hmac.compare_digest(digest.hex(), expected)


class Accounts(Database):
    """Organizations, projects, settings, tokens and users."""

    # -- identity ----------------------------------------------------------------------------

    def ensure_identity(self) -> Identity:
        """The default organization, project, tokens and user; created and saved on first call."""
        with self._transaction() as db:
            rows = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if not all(key in rows for key in _IDENTITY_KEYS):
                organization = self._insert_organization(db, "Local Organization")
                project = self._insert_project(db, organization, "Local Project")
                user_token = self._insert_token(
                    db, organization, None, ["user", "client"], "Collector user token", None
                )
                project_token = self._insert_token(
                    db, organization, project, ["client"], "Collector project token", None
                )
                rows.update(
                    organization_id=organization,
                    project_id=project,
                    user_token=user_token["id"],
                    project_token=project_token["id"],
                )
            if "admin_password" not in rows:
                password = secrets.token_urlsafe(12)
                self._insert_user(db, rows["organization_id"], ADMIN_EMAIL, "Admin", password)
                rows.update(admin_email=ADMIN_EMAIL, admin_password=password)
            db.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [(key, rows[key]) for key in (*_IDENTITY_KEYS, "admin_email", "admin_password")],
            )
        return Identity(
            organization_id=rows["organization_id"],
            project_id=rows["project_id"],
            user_token=rows["user_token"],
            project_token=rows["project_token"],
            admin_email=rows["admin_email"],
            admin_password=rows["admin_password"],
        )

    def ensure_meta_value(self, key: str, make: Any) -> str:
        """The ``meta`` value under ``key``, created with ``make()`` if missing."""
        with self._transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            if row is not None:
                return str(row[0])
            value = str(make())
            db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
            return value

    # -- organizations and projects ----------------------------------------------------------

    @staticmethod
    def _insert_organization(db: sqlite3.Connection, name: str) -> str:
        organization_id = new_object_id()
        db.execute(
            "INSERT INTO organizations (id, name, created_utc) VALUES (?, ?, ?)",
            (organization_id, name, format_utc(utc_now())),
        )
        return organization_id

    @staticmethod
    def _insert_project(db: sqlite3.Connection, organization_id: str, name: str) -> str:
        project_id = new_object_id()
        db.execute(
            "INSERT INTO projects (id, organization_id, name, created_utc) VALUES (?, ?, ?, ?)",
            (project_id, organization_id, name, format_utc(utc_now())),
        )
        return project_id

    def create_organization(self, name: str) -> str:
        """A new organization's id."""
        with self._transaction() as db:
            return self._insert_organization(db, clean_text(name) or "Organization")

    def create_project(self, organization_id: str, name: str) -> dict[str, Any]:
        """Create a project in an existing organization; returns its API representation."""
        with self._transaction() as db:
            found = db.execute("SELECT 1 FROM organizations WHERE id = ?", (organization_id,))
            if found.fetchone() is None:
                raise KeyError(f"no organization {organization_id!r}")
            project_id = self._insert_project(db, organization_id, clean_text(name) or "Project")
        project = self.get_project(project_id)
        assert project is not None
        return project

    _PROJECT_SELECT = """
        SELECT p.id, p.created_utc, p.organization_id, o.name, p.name,
               (SELECT COUNT(*) FROM stacks s WHERE s.project_id = p.id),
               (SELECT COALESCE(SUM(s.events), 0) FROM stacks s WHERE s.project_id = p.id)
        FROM projects p JOIN organizations o ON o.id = p.organization_id
    """

    @staticmethod
    def _project_resource(row: tuple[Any, ...]) -> dict[str, Any]:
        project_id, created, organization_id, organization_name, name, stacks, events = row
        return {
            "id": project_id,
            "created_utc": created,
            "organization_id": organization_id,
            "organization_name": organization_name,
            "name": name,
            "delete_bot_data_enabled": False,
            "data": {},
            "promoted_tabs": [],
            "is_configured": events > 0,
            "stack_count": int(stacks),
            "event_count": int(events),
            "has_premium_features": False,
            "has_slack_integration": False,
            "usage_hours": [],
            "usage": [],
        }

    def get_project(self, project_id: str) -> dict[str, Any] | None:
        """A project's API representation, or None."""
        with self._locked() as db:
            row = db.execute(self._PROJECT_SELECT + " WHERE p.id = ?", (project_id,)).fetchone()
        return None if row is None else self._project_resource(row)

    def list_projects(
        self, organization_id: str | None, offset: int = 0, limit: int = 1000
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of an organization's projects (all organizations when None), and the total."""
        where, params = (
            ("", ())
            if organization_id is None
            else (" WHERE p.organization_id = ?", (organization_id,))
        )
        with self._locked() as db:
            total = db.execute("SELECT COUNT(*) FROM projects p" + where, params).fetchone()[0]
            rows = db.execute(
                self._PROJECT_SELECT + where + " ORDER BY p.name COLLATE NOCASE, p.seq"
                " LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ).fetchall()
        return [self._project_resource(row) for row in rows], int(total)

    def project_names(self) -> dict[str, str]:
        """Every project's name by id."""
        with self._locked() as db:
            rows = db.execute("SELECT id, name FROM projects ORDER BY seq").fetchall()
        return {str(row[0]): str(row[1]) for row in rows}

    def project_config(self, project_id: str) -> tuple[int, dict[str, str]]:
        """A project's client configuration: ``(version, settings)``."""
        with self._locked() as db:
            row = db.execute(
                "SELECT config_version, settings FROM projects WHERE id = ?", (project_id,)
            ).fetchone()
        if row is None:
            raise KeyError(f"no project {project_id!r}")
        return int(row[0]), dict(json.loads(row[1]))

    def set_project_setting(self, project_id: str, key: str, value: str | None) -> int:
        """Set (or with None remove) a configuration setting; returns the version, bumped when
        something changed (removing a missing key changes nothing)."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT config_version, settings FROM projects WHERE id = ?", (project_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"no project {project_id!r}")
            settings = dict(json.loads(row[1]))
            version = int(row[0])
            if value is None:
                if key not in settings:
                    return version
                del settings[key]
            else:
                settings[clean_text(key) or key] = clean_text(value) or ""
            version += 1
            db.execute(
                "UPDATE projects SET config_version = ?, settings = ? WHERE id = ?",
                (version, dumps(settings), project_id),
            )
            return version

    # -- tokens ------------------------------------------------------------------------------

    @staticmethod
    def _insert_token(
        db: sqlite3.Connection,
        organization_id: str,
        project_id: str | None,
        scopes: list[str],
        notes: str | None,
        expires: datetime | None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        key = new_token_key()
        now = format_utc(utc_now())
        expires_utc = None if expires is None else format_utc(expires)
        row = (
            key,
            organization_id,
            project_id,
            dumps(scopes),
            clean_text(notes),
            expires_utc,
            0,
            now,
            now,
            user_id,
        )
        db.execute(
            "INSERT INTO tokens (id, organization_id, project_id, scopes, notes, expires_utc,"
            " is_disabled, created_utc, updated_utc, user_id, expires_ts)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row, None if expires is None else expires.timestamp()),
        )
        return Accounts._token_resource(row)

    @staticmethod
    def _token_resource(row: tuple[Any, ...]) -> dict[str, Any]:
        key, organization_id, project_id, scopes, notes, expires_utc, disabled = row[:7]
        created, updated, user_id = row[7:10]
        return {
            "id": key,
            "organization_id": organization_id,
            "project_id": project_id,
            "user_id": user_id,
            "default_project_id": None,
            "scopes": json.loads(scopes),
            "expires_utc": expires_utc,
            "notes": notes,
            "is_disabled": bool(disabled),
            "is_suspended": False,
            "created_utc": created,
            "updated_utc": updated,
        }

    def create_token(
        self,
        organization_id: str,
        project_id: str | None,
        scopes: list[str],
        notes: str | None = None,
        expires: datetime | None = None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        """Create a token; returns its API representation (``id`` is the key)."""
        with self._transaction() as db:
            return self._insert_token(
                db, organization_id, project_id, scopes, notes, expires, user_id
            )

    def get_token_resource(self, key: str) -> dict[str, Any] | None:
        """A token's API representation, or None."""
        with self._locked() as db:
            row = db.execute(
                "SELECT id, organization_id, project_id, scopes, notes, expires_utc, is_disabled,"
                " created_utc, updated_utc, user_id FROM tokens WHERE id = ?",
                (key,),
            ).fetchone()
        return None if row is None else self._token_resource(row)

    def get_token(self, key: str) -> TokenRecord | None:
        """A token for authentication, or None if unknown."""
        with self._locked() as db:
            row = db.execute(
                "SELECT id, organization_id, project_id, scopes, is_disabled, expires_ts, user_id"
                " FROM tokens WHERE id = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        return TokenRecord(
            id=row[0],
            organization_id=row[1],
            project_id=row[2],
            scopes=tuple(json.loads(row[3])),
            is_disabled=bool(row[4]),
            expires_ts=row[5],
            user_id=row[6],
        )

    def set_token_disabled(self, key: str, disabled: bool = True) -> None:
        """Disable (or enable again) a token."""
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE tokens SET is_disabled = ?, updated_utc = ? WHERE id = ?",
                (int(disabled), format_utc(utc_now()), key),
            )
            if cursor.rowcount == 0:
                raise KeyError("no such token")

    # -- users -------------------------------------------------------------------------------

    @staticmethod
    def _insert_user(
        db: sqlite3.Connection, organization_id: str, email: str, name: str, password: str
    ) -> str:
        user_id = new_object_id()
        db.execute(
            "INSERT INTO users (id, organization_id, email, full_name, password_hash,"
            " created_utc) VALUES (?, ?, ?, ?, ?, ?)",
            (user_id, organization_id, email, name, hash_password(password), format_utc(utc_now())),
        )
        return user_id

    def create_user(
        self, organization_id: str, email: str, password: str, name: str = ""
    ) -> UserRecord:
        """Add a user (``ValueError`` if the e-mail address is taken)."""
        with self._transaction() as db:
            try:
                user_id = self._insert_user(db, organization_id, email, name or email, password)
            except sqlite3.IntegrityError:
                raise ValueError(f"a user with e-mail {email!r} exists") from None
        return UserRecord(user_id, organization_id, email, name or email)

    def check_login(self, email: str, password: str) -> UserRecord | None:
        """The user with these credentials, or None."""
        with self._locked() as db:
            row = db.execute(
                "SELECT id, organization_id, email, full_name, password_hash FROM users"
                " WHERE email = ?",
                (clean_text(email),),
            ).fetchone()
        if row is None:
            hash_password(password)  # the same time as a wrong password
            return None
        if not check_password(password, row[4]):
            return None
        return UserRecord(row[0], row[1], row[2], row[3])
