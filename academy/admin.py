"""Administrator CLI, for whoever runs the server (the only source of admin rights, review F-8).

``python -m academy.admin create-admin EMAIL`` makes an existing account an
administrator; with ``--create`` it creates the account first (the password is
read from the prompt, never from argv). ``python -m academy.admin admin-token``
prints a one-time token, valid one hour, that a signed-in learner redeems on
the Account page to become an administrator (for a server whose shell is not
where the admin's browser is).
"""

from __future__ import annotations

import argparse
import getpass
import sys

from academy.accounts import (
    ADMIN_TOKEN_HOURS,
    AccountError,
    create_admin_token,
    make_admin,
    sign_up,
)
from academy.db import session_scope


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m academy.admin")
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create-admin", help="make EMAIL an administrator")
    create.add_argument("email")
    create.add_argument(
        "--create", action="store_true", help="create the account too (asks for a password)"
    )
    sub.add_parser("admin-token", help=f"print a one-time admin token (valid {ADMIN_TOKEN_HOURS} h)")
    args = parser.parse_args(argv)
    try:
        with session_scope() as session:
            if args.command == "admin-token":
                token = create_admin_token(session=session)
                print(f"One-time administrator token, valid {ADMIN_TOKEN_HOURS} h. Sign in, open "
                      "Account, and enter it under 'Administrator token':")
                print(token)
                return 0
            if args.create:
                password = getpass.getpass("Password: ")
                sign_up(session=session, email=args.email, password=password)
            learner = make_admin(session=session, email=args.email)
    except AccountError as err:
        print(err, file=sys.stderr)  # English, for the operator
        return 1
    print(f"{learner.email} is now an administrator.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
