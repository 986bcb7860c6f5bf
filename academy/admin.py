"""Administrator CLI: ``python -m academy.admin create-admin EMAIL``.

Makes an existing account an administrator; with ``--create`` it creates
the account first (the password is read from the prompt, never from argv).
"""

from __future__ import annotations

import argparse
import getpass
import sys

from academy.accounts import AccountError, make_admin, sign_up
from academy.db import session_scope
from academy.i18n import t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m academy.admin")
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create-admin", help="make EMAIL an administrator")
    create.add_argument("email")
    create.add_argument(
        "--create", action="store_true", help="create the account too (asks for a password)"
    )
    args = parser.parse_args(argv)
    try:
        with session_scope() as session:
            if args.create:
                password = getpass.getpass("Password: ")
                sign_up(session=session, email=args.email, password=password)
            learner = make_admin(session=session, email=args.email)
    except AccountError as err:
        print(t(err.code, "en"), file=sys.stderr)
        return 1
    print(f"{learner.email} is now an administrator.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
