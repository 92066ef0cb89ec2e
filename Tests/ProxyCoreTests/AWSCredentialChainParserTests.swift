import ProxyCore
import ScopePolicy
import Testing

/// The chain's readers: the shared files' INI dialect (botocore's configparser reading), shell
/// words for credential_process, STS XML, metadata and process JSON, and the packed form. Strict,
/// bounded, and no input traps (a fixed-seed garbage loop).
@Suite struct AWSCredentialChainParserTests {
    static func parse(_ text: String) -> Result<AWSSharedConfigFile, AWSSharedConfigError> {
        AWSSharedConfigFile.parse(Array(text.utf8), path: "/c")
    }

    // MARK: INI

    @Test func readsSectionsKeysCommentsAndNestedSubsections() throws {
        let text = """
            # a comment
            ; another
            [default]
            Region = eu-west-1
            output: json
            s3 =
              addressing_style = path
              signature_version = s3v4
            note = a # not a comment
            multi = first
              second
            \r
            [profile dev]\r
            aws_access_key_id=AKIA\r
            [DEFAULT]
            fallback = yes
            """
        let file = try Self.parse(text).get()
        #expect(file.order == ["default", "profile dev"])
        #expect(
            file.sections["default"] == [
                "region": "eu-west-1", "output": "json", "note": "a # not a comment", "multi": "first\nsecond", "fallback": "yes",
            ])
        #expect(file.sections["profile dev"] == ["aws_access_key_id": "AKIA", "fallback": "yes"])
    }

    @Test(arguments: [
        ("key = v\n[default]\n", 1, AWSSharedConfigError.Problem.missingSectionHeader),
        ("[a]\nx = 1\n[a]\n", 3, .duplicateSection),
        ("[a]\nx = 1\nX = 2\n", 3, .duplicateKey),
        ("[a]\nAKIASECRETCANARY\n", 2, .noDelimiter),
        ("[a]\n= v\n", 2, .emptyKey),
        ("[a]\ns3 =\n  nodelimiter\n", 2, .nestedWithoutDelimiter),
        ("[]\n", 1, .missingSectionHeader),
    ])
    func refusesWhatConfigparserRefuses(text: String, line: Int, problem: AWSSharedConfigError.Problem) {
        guard case .failure(let error) = Self.parse(text) else {
            Issue.record("expected an error")
            return
        }
        #expect(error.line == line)
        #expect(error.problem == problem)
        #expect(!error.description.contains("CANARY"))
    }

    @Test func isBounded() {
        let big = [UInt8](repeating: UInt8(ascii: "#"), count: AWSSharedConfigFile.maxFileBytes + 1)
        #expect(
            AWSSharedConfigFile.parse(big, path: "/c")
                == .failure(AWSSharedConfigError(path: "/c", line: 0, problem: .tooLarge(limit: AWSSharedConfigFile.maxFileBytes))))
        let lines = Array(String(repeating: "\n", count: AWSSharedConfigFile.maxLines + 1).utf8)
        #expect(
            AWSSharedConfigFile.parse(lines, path: "/c")
                == .failure(AWSSharedConfigError(path: "/c", line: 0, problem: .tooManyLines(limit: AWSSharedConfigFile.maxLines))))
        #expect(AWSSharedConfigFile.parse([0x5B, 0xFF, 0x5D], path: "/c") == .failure(AWSSharedConfigError(path: "/c", line: 0, problem: .notUTF8)))
    }

    @Test func profilesAsBotocoreMapsThem() throws {
        let config = try Self.parse("[default]\na = 1\n[profile dev]\na = 2\n[profile \"my dev\"]\na = 3\n[preview]\na = 4\n[profile  x y]\na = 5\n")
            .get()
        let credentials = try Self.parse("[dev]\nb = 1\n[profile dev]\nb = 2\n").get()
        let profiles = AWSSharedProfiles(config: config, credentials: credentials)
        #expect(profiles.configProfiles == ["default": ["a": "1"], "dev": ["a": "2"], "my dev": ["a": "3"]])
        #expect(profiles.merged("dev") == ["a": "2", "b": "1"])
        #expect(profiles.exists("profile dev"))  // the credentials file's names are plain
        #expect(!profiles.exists("preview"))
        // The later of [default] and [profile default] wins.
        let both = try Self.parse("[profile default]\na = 1\n[default]\na = 2\n").get()
        #expect(AWSSharedProfiles(config: both, credentials: nil).configProfiles["default"] == ["a": "2"])
    }

    // MARK: Shell words (Python's shlex.split, posix)

    @Test(arguments: [
        ("a b  c", ["a", "b", "c"]),
        ("'a b' \"c d\"", ["a b", "c d"]),
        (#"a\ b "x\"y" 'x\y' "p\q""#, ["a b", #"x"y"#, #"x\y"#, #"p\q"#]),
        ("a'b'c \"\"", ["abc", ""]),
        ("#not a comment", ["#not", "a", "comment"]),
        ("", []),
    ])
    func splitsAsShlexDoes(text: String, words: [String]) throws {
        #expect(try AWSShellWords.split(text) == words)
    }

    @Test func refusesUnclosedQuotes() {
        #expect(throws: AWSShellWords.Invalid.unclosedQuote) { try AWSShellWords.split("a 'b") }
        #expect(throws: AWSShellWords.Invalid.unclosedQuote) { try AWSShellWords.split("a \"b") }
        #expect(throws: AWSShellWords.Invalid.danglingEscape) { try AWSShellWords.split("a \\") }
    }

    // MARK: Responses

    @Test func readsSTSWithNamespacesEntitiesAndADeclaration() throws {
        let body = """
            <?xml version="1.0" encoding="UTF-8"?>
            <sts:AssumeRoleResponse xmlns:sts="https://sts.amazonaws.com/doc/2011-06-15/">
              <sts:AssumeRoleResult><sts:Credentials>
                <sts:AccessKeyId>ASIA1</sts:AccessKeyId>
                <sts:SecretAccessKey>a&amp;b&#x2F;c&#43;</sts:SecretAccessKey>
                <sts:SessionToken>tok</sts:SessionToken>
                <sts:Expiration>2026-12-02T11:22:26.000Z</sts:Expiration>
              </sts:Credentials></sts:AssumeRoleResult>
            </sts:AssumeRoleResponse>
            """
        let credentials = try AWSCredentialResponse.sts(.assumeRole, status: 200, body: Array(body.utf8)).get()
        #expect(credentials.secretAccessKey == SecretValue("a&b/c+"))
        #expect(credentials.expiration == 1_796_210_546)
    }

    @Test(arguments: [
        "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>A</AccessKeyId><AccessKeyId>B</AccessKeyId></Credentials></AssumeRoleResult></AssumeRoleResponse>",
        "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey><SessionToken>T</SessionToken><Expiration>soon</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>",
        "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S&#10;X</SecretAccessKey><SessionToken>T</SessionToken><Expiration>2026-12-02T11:22:26Z</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>",
        "<AssumeRoleResponse><![CDATA[x]]></AssumeRoleResponse>",
        "<AssumeRoleResponse></Other>",
        "<AssumeRoleResponse>&bogus;</AssumeRoleResponse>",
        "<AssumeRoleResponse/>trailing",
        String(repeating: "<a>", count: 40) + String(repeating: "</a>", count: 40),
    ])
    func refusesMalformedSTS(body: String) {
        guard case .failure(.malformed) = AWSCredentialResponse.sts(.assumeRole, status: 200, body: Array(body.utf8)) else {
            Issue.record("expected malformed")
            return
        }
    }

    @Test func errorCodesOnlyWhenDocumented() {
        let known = #"<ErrorResponse><Error><Code>ExpiredToken</Code><Message>m</Message></Error></ErrorResponse>"#
        #expect(AWSCredentialResponse.sts(.assumeRole, status: 400, body: Array(known.utf8)) == .failure(.rejected(status: 400, code: .expiredToken)))
        let unknown = #"<ErrorResponse><Error><Code>Made Up</Code></Error></ErrorResponse>"#
        #expect(AWSCredentialResponse.sts(.assumeRole, status: 400, body: Array(unknown.utf8)) == .failure(.rejected(status: 400, code: nil)))
    }

    @Test func metadataNeedsAllFourAndIMDSNeedsSuccess() {
        let full = #"{"AccessKeyId": "A", "SecretAccessKey": "S", "Token": "T", "Expiration": "2026-12-02T11:22:26Z"}"#
        #expect((try? AWSCredentialResponse.metadata(status: 200, body: Array(full.utf8), requiresSuccessCode: false).get()) != nil)
        #expect(
            AWSCredentialResponse.metadata(status: 200, body: Array(full.utf8), requiresSuccessCode: true)
                == .failure(.malformed("Code is not Success")))
        let noToken = #"{"AccessKeyId": "A", "SecretAccessKey": "S", "Expiration": "2026-12-02T11:22:26Z"}"#
        guard case .failure(.malformed) = AWSCredentialResponse.metadata(status: 200, body: Array(noToken.utf8), requiresSuccessCode: false) else {
            Issue.record("expected malformed")
            return
        }
        #expect(AWSCredentialResponse.metadata(status: 404, body: [], requiresSuccessCode: false) == .failure(.unexpectedStatus(404)))
    }

    @Test func processOutputRules() throws {
        let minimal = try AWSCredentialResponse.process(output: Array(#"{"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "S"}"#.utf8)).get()
        #expect(minimal.sessionToken == nil)
        #expect(minimal.expiration == nil)
        for bad in [
            #"{"AccessKeyId": "A", "SecretAccessKey": "S"}"#, #"{"Version": "1", "AccessKeyId": "A", "SecretAccessKey": "S"}"#,
            #"{"Version": 1, "AccessKeyId": "A-B", "SecretAccessKey": "S"}"#,
            #"{"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "S", "SessionToken": 5}"#,
            #"{"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "S", "Expiration": "tomorrow"}"#, #"[1]"#,
        ] {
            guard case .failure = AWSCredentialResponse.process(output: Array(bad.utf8)) else {
                Issue.record("accepted \(bad)")
                continue
            }
        }
    }

    // MARK: Packed form

    @Test func packedRoundTrips() throws {
        let full = try #require(
            AWSTemporaryCredentials(
                accessKeyID: Array("ASIA1".utf8), secretAccessKey: Array("s/+=".utf8), sessionToken: Array("t".utf8), expiration: 1_796_210_546))
        #expect(AWSTemporaryCredentials(packed: full.packed) == full)
        let long = try #require(
            AWSTemporaryCredentials(accessKeyID: Array("AKIA1".utf8), secretAccessKey: Array("s".utf8), sessionToken: nil, expiration: nil))
        #expect(AWSTemporaryCredentials(packed: long.packed) == long)
        #expect("\(full.packed)" == "<redacted>")
        for bad in ["", "aws2\nA\nS\n\n1", "aws1\nA\nS\nT\n99999999999999999999", "aws1\nA\n\n\n", "aws1\nA\nS\nT\n1\n"] {
            #expect(AWSTemporaryCredentials(packed: SecretValue(bad)) == nil, "\(bad.utf8.count)")
        }
        #expect(AWSTemporaryCredentials(accessKeyID: Array("A".utf8), secretAccessKey: Array("a\nb".utf8), sessionToken: nil, expiration: nil) == nil)
    }

    // MARK: Garbage

    /// Fixed-seed random bytes and mutations of valid inputs through every reader: none may trap.
    @Test func garbageNeverTraps() {
        var state: UInt64 = 0x5EED_AB5E_1234_5678
        func next() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
        let seeds: [[UInt8]] = [
            Array(
                "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>A</AccessKeyId></Credentials></AssumeRoleResult></AssumeRoleResponse>"
                    .utf8),
            Array(#"{"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "S", "Expiration": "2026-12-02T11:22:26Z"}"#.utf8),
            Array("[default]\na = b\n  c = d\n[profile x]\nrole_arn = r\n".utf8),
            Array("aws1\nA\nS\nT\n12".utf8),
        ]
        let alphabet = Array("<>/&;#x0123456789{}[]\":,= \n\r\t'\\ab".utf8)
        for round in 0..<4000 {
            var bytes = seeds[round % seeds.count]
            for _ in 0..<(1 + Int(next() % 6)) {
                let position = bytes.isEmpty ? 0 : Int(next() % UInt64(bytes.count))
                switch next() % 4 {
                case 0 where !bytes.isEmpty: bytes[position] = alphabet[Int(next() % UInt64(alphabet.count))]
                case 1: bytes.insert(UInt8(truncatingIfNeeded: next()), at: position)
                case 2 where !bytes.isEmpty: bytes.remove(at: position)
                default: bytes.insert(alphabet[Int(next() % UInt64(alphabet.count))], at: position)
                }
            }
            _ = AWSCredentialResponse.sts(.assumeRole, status: 200, body: bytes)
            _ = AWSCredentialResponse.sts(.assumeRole, status: 403, body: bytes)
            _ = AWSCredentialResponse.metadata(status: 200, body: bytes, requiresSuccessCode: true)
            _ = AWSCredentialResponse.process(output: bytes)
            _ = AWSCredentialResponse.instanceRoleName(status: 200, body: bytes)
            _ = AWSSharedConfigFile.parse(bytes, path: "/g")
            _ = AWSTemporaryCredentials(packed: SecretValue(bytes: bytes))
            _ = try? AWSShellWords.split(String(decoding: bytes, as: UTF8.self))
        }
    }
}

/// What prints of the chain's values: never a credential, request byte, argument or answer.
@Suite struct AWSCredentialChainPrintingTests {
    @Test func nothingSecretPrints() throws {
        let credentials = try #require(
            AWSTemporaryCredentials(
                accessKeyID: Array("AKIACANARY".utf8), secretAccessKey: Array("SECRET-CANARY".utf8), sessionToken: Array("TOKEN-CANARY".utf8),
                expiration: 5))
        let texts = [
            "\(credentials)", String(reflecting: credentials), "\(AWSChainStep.finished(credentials, source: .environment))",
            "\(AWSChainStep.run(argv: ["get", "--secret", "ARG-CANARY"]))", "\(AWSChainInput.response(status: 200, body: Array("BODY-CANARY".utf8)))",
            "\(AWSChainInput.commandOutput(Array("OUT-CANARY".utf8)))",
        ]
        for text in texts { #expect(!text.contains("CANARY"), "\(text)") }
        var dumped = ""
        dump(AWSChainStep.finished(credentials, source: .environment), to: &dumped)
        dump(AWSChainStep.run(argv: ["ARG-CANARY"]), to: &dumped)
        #expect(!dumped.contains("CANARY"), "\(dumped)")
    }
}
