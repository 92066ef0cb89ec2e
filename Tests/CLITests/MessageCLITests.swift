import Foundation
import TestSupport
import Testing

/// The stderr lines of `run` up to `listening on`.
private func bannerLines(_ proxy: ProxyProcess) -> [String] {
    let lines = proxy.standardError.split(separator: "\n").map(String.init)
    guard let end = lines.firstIndex(where: { $0.hasPrefix("listening on ") }) else { return lines }
    return Array(lines[...end])
}

@Suite("CLI: messages that say what is true and point at the fix", .serialized)
struct MessageCLITests {
    @Test("the banner says what a signing scope and a substituting scope put on requests, never 'injects nothing'")
    func bannerNamesEveryCredentialKind() throws {
        let scratch = ScratchDirectory()
        let awsSecret = "CANARY-banner-aws-\(UInt32.random(in: 0...UInt32.max))"
        let placeholderValue = "CANARY-banner-ph-\(UInt32.random(in: 0...UInt32.max))"
        let config = scratch.write(
            "c.yaml",
            """
            secrets:
              kid: { env: MSG_KID }
              skey: { env: MSG_SKEY }
              gh: { env: MSG_PH, placeholder: true }
              cs: { env: MSG_CS }
              partner: { oauth2: { token_url: "https://auth.partner.example/token", grant: client_credentials, client_id: me, client_secret: cs } }
            scopes:
              - name: aws
                origins: ["https://s3.eu-west-1.amazonaws.com"]
                sign: { aws_sigv4: { service: s3, region: eu-west-1, access_key_id: kid, secret_access_key: skey } }
              - { name: github, origins: ["https://api.github.com"], substitute: [gh] }
              - { name: partner, origins: ["https://api.partner.example"], inject: { Authorization: "Bearer ${partner}" } }
              - { name: bare, origins: ["https://bare.example"], pass: [Cookie] }
            tls: { ca_dir: \(scratch.path)/ca }
            """)
        let proxy = try ProxyProcess(
            arguments: ["--config", config, "--no-access-log"],
            environment: ["MSG_KID": "AKIDEXAMPLE", "MSG_SKEY": awsSecret, "MSG_PH": placeholderValue, "MSG_CS": "cs-value"])
        defer { proxy.terminate() }
        let lines = bannerLines(proxy)
        let text = lines.joined(separator: "\n")
        #expect(lines.contains("    signs AWS SigV4 (service s3, region eu-west-1; secrets kid, skey); passes no client credential"), "\(text)")
        #expect(lines.contains("    substitutes the placeholders of secret gh; passes no client credential"), "\(text)")
        #expect(lines.contains("    injects Authorization (OAuth2 token partner); passes no client credential"), "\(text)")
        #expect(lines.contains("    injects nothing; passes Cookie"), "only a scope with no credential action says so: \(text)")
        #expect(lines.filter { $0.contains("injects nothing") }.count == 1)
        #expect(!text.contains(awsSecret) && !text.contains(placeholderValue) && !text.contains("AKIDEXAMPLE"))
    }

    @Test("with tunnels denied and nothing intercepted, the banner says HTTPS through the proxy is refused, not 'unseen'")
    func bannerAgreesWithTheTunnelPolicy() throws {
        let denied = try ProxyProcess(arguments: ["--no-access-log", "--tunnel", "deny"], environment: ["SCOPEPROXY_CONFIG": ""])
        defer { denied.terminate() }
        let lines = bannerLines(denied)
        #expect(!lines.joined(separator: "\n").contains("unseen"), "\(lines)")
        #expect(lines.contains("  TLS interception: off (HTTPS through the proxy is refused: CONNECT is denied and no host is in tls.intercept)"))
        #expect(lines.contains("  CONNECT tunnels: denied (403)"))
        let allowed = try ProxyProcess(arguments: ["--no-access-log", "--tunnel", "allow"], environment: ["SCOPEPROXY_CONFIG": ""])
        defer { allowed.terminate() }
        #expect(bannerLines(allowed).contains("  TLS interception: off (HTTPS goes through CONNECT, unseen)"))
    }

    @Test("explain without --client names the scope that covers the origin for other clients and suggests --client")
    func explainWithoutClient() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { token: { env: EXPLAIN_TOKEN }, key: { env: AGENT_KEY } }
            clients: [{ name: agent, auth: { bearer: key } }, { name: ci, uid: 1001 }]
            scopes: [{ name: api, origins: ["https://api.example"], inject: { Authorization: "Bearer ${token}" }, clients: [agent] }]
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca }
            """)
        let unnamed = try runBinary(["explain", "--config", config, "https://api.example/v1"])
        #expect(unnamed.status == 0, "\(unnamed.stderr)")
        #expect(!unnamed.stdout.contains("none covers this origin"), "\(unnamed.stdout)")
        #expect(
            unnamed.stdout.contains("scope api covers this origin but serves only clients agent: explain that client's request with --client agent"),
            "\(unnamed.stdout)")
        let other = try runBinary(["explain", "--config", config, "--client", "ci", "https://api.example/v1"])
        #expect(other.stdout.contains("scope api covers this origin but serves only clients agent, not 'ci'"), "\(other.stdout)")

        // Another scope covers the origin for everyone: the one for named clients is still named.
        let shared = scratch.write(
            "shared.yaml",
            """
            secrets: { token: { env: EXPLAIN_TOKEN }, key: { env: AGENT_KEY } }
            clients: [{ name: agent, auth: { bearer: key } }, { name: anonymous }]
            scopes:
              - { name: api, origins: ["https://api.example"], inject: { Authorization: "Bearer ${token}" }, clients: [agent] }
              - { name: public, origins: ["https://api.example"], pass: [Cookie] }
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca }
            """)
        let sharedOutcome = try runBinary(["explain", "--config", shared, "https://api.example/v1"])
        #expect(sharedOutcome.stdout.contains("scopes        public (origins https://api.example)"), "\(sharedOutcome.stdout)")
        #expect(sharedOutcome.stdout.contains("api covers it too, for clients agent only (explain with --client agent)"), "\(sharedOutcome.stdout)")
    }

    @Test("check: a misspelt 'pahts' suggests paths; a port out of range says so; an origin with a path suggests paths:")
    func checkMessages() throws {
        let scratch = ScratchDirectory()
        let typo = scratch.write("typo.yaml", "scopes:\n  - name: s\n    origins: [\"https://a.example\"]\n    pahts: [\"/v1/\"]\n")
        let typoOutcome = try runBinary(["check", "--config", typo])
        #expect(typoOutcome.status == 2)
        #expect(typoOutcome.stderr.contains("typo.yaml:4:5: unknown key 'pahts' in a scope, did you mean 'paths'?"), "\(typoOutcome.stderr)")

        // The command line's did-you-mean uses the same distance: two letters swapped are one edit.
        let command = try runBinary(["chekc", "--config", typo])
        #expect(command.status == 2)
        #expect(command.stderr.contains("did you mean 'check'?"), "\(command.stderr)")

        let port = scratch.write("port.yaml", "listen: \"127.0.0.1:99999\"\n")
        let portOutcome = try runBinary(["check", "--config", port])
        #expect(portOutcome.status == 2)
        #expect(portOutcome.stderr.contains("port.yaml:1:9: port 99999 is out of range: use 1-65535 (or 0 for a free port)"), "\(portOutcome.stderr)")
        let cli = try runBinary(["run", "--listen", "127.0.0.1:99999"], removing: ["SCOPEPROXY_CONFIG"])
        #expect(cli.status == 2)
        #expect(
            cli.stderr.contains("option --listen expects HOST:PORT, like 127.0.0.1:8080, but port 99999 is out of range: use 1-65535"),
            "\(cli.stderr)")

        let path = scratch.write("path.yaml", "scopes:\n  - name: s\n    origins: [\"https://api.example.com/v1\"]\n")
        let pathOutcome = try runBinary(["check", "--config", path])
        #expect(pathOutcome.status == 2)
        #expect(
            pathOutcome.stderr.contains(
                "path.yaml:3:15: invalid origin 'https://api.example.com/v1': an origin has no path; "
                    + "write 'https://api.example.com' in origins and add paths: [\"/v1/\"] to the scope"), "\(pathOutcome.stderr)")
    }

    @Test("an origin is printed one way in the banner, explain and config print: the default port left out")
    func oneOriginSpelling() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { token: { env: MSG_TOKEN } }
            scopes: [{ name: api, origins: ["https://api.example:443", "https://alt.example:8443"], inject: { X-Key: "${token}" } }]
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca }
            """)
        let proxy = try ProxyProcess(arguments: ["--config", config, "--no-access-log"], environment: ["MSG_TOKEN": "t"])
        defer { proxy.terminate() }
        #expect(bannerLines(proxy).contains("  scope api: https://alt.example:8443, https://api.example"))
        let explained = try runBinary(["explain", "--config", config, "https://api.example:443/v1"], environment: ["MSG_TOKEN": "t"])
        #expect(explained.stdout.contains("origin        https://api.example\n"), "\(explained.stdout)")
        #expect(explained.stdout.contains("scopes        api (origins https://alt.example:8443, https://api.example)"), "\(explained.stdout)")
        // Only the request line echoes the URL as given; every origin the report prints is spelled one way.
        let report = explained.stdout.split(separator: "\n").filter { !$0.hasPrefix("request ") }.joined(separator: "\n")
        #expect(!report.contains("https://api.example:443"), "a CONNECT names host:port; an origin never shows its default port: \(explained.stdout)")
    }
}
