"""botocore's clock, frozen at a given moment: its signers read the time themselves, and a test (or an
origin re-signing what it received) must sign at the moment the request was signed. Shared by
Tests/AWSSigV4Tests/botocore_sign.py and Tests/Fixtures/sigv4_origin.py."""

import datetime
import types

import botocore.auth


def freeze_clock(moment):
    """botocore >= 1.35 asks get_current_datetime(); older releases call datetime.datetime.utcnow()."""

    class FrozenDateTime(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return moment

        @classmethod
        def now(cls, tz=None):
            return moment if tz is None else moment.replace(tzinfo=tz)

    botocore.auth.datetime = types.SimpleNamespace(
        datetime=FrozenDateTime, timezone=datetime.timezone, timedelta=datetime.timedelta
    )
    if hasattr(botocore.auth, "get_current_datetime"):
        botocore.auth.get_current_datetime = lambda *args, **kwargs: moment
