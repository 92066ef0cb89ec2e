#!/usr/bin/env python3
"""botocore's reading of AWS shared config files, as a reference for AWSSharedConfigFile /
AWSSharedProfiles (ProxyEngineTests/AWSSharedConfigBotocoreTests).

    aws_config_parse.py FILE...

Prints one JSON line per FILE: {"ok": true, "profiles": {NAME: {KEY: VALUE}}} from
botocore.configloader.load_config (configparser, then build_profile_map), nested sub-sections
(dictionaries) left out as the proxy leaves them out; or {"ok": false} when botocore refuses the
file (ConfigParseError)."""

import json
import sys

import botocore.configloader
import botocore.exceptions

for path in sys.argv[1:]:
    try:
        loaded = botocore.configloader.load_config(path)
    except botocore.exceptions.ConfigParseError:
        print(json.dumps({"ok": False}))
        continue
    profiles = {
        name: {key: value for key, value in values.items() if isinstance(value, str)}
        for name, values in loaded["profiles"].items()
    }
    print(json.dumps({"ok": True, "profiles": profiles}))
