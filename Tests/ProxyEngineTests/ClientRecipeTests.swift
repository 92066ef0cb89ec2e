import Foundation
import TestSupport
import Testing

// The client recipes of README.md and docs/https.md, run as written against the built binary. Each
// one must make an injected canary token arrive at a loopback origin: the origin only ever gets it
// from the proxy, so it proves the request went through scopeproxy. The clients run with a minimal
// environment (no inherited *_proxy or CA variables), so the variables each recipe names are the
// only ones in play. Every client here is installed by `make test` (packages-test); none is skipped.

private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

private func recipe(_ name: String) -> String { repositoryRoot.appendingPathComponent("docs/recipes/\(name)").path }

/// A client run: exit status and what it printed.
private struct ClientRun {
    let status: Int32
    let stdout: String
    let stderr: String
}

/// Runs a client under `environment` plus only what finding executables needs (PATH, HOME, pyenv),
/// killed after 30 s so a client that hangs fails the test instead of stalling the suite.
private func runClient(_ arguments: [String], environment: [String: String]) throws -> ClientRun {
    let inherited = ProcessInfo.processInfo.environment
    var childEnvironment: [String: String] = [:]
    for key in ["PATH", "HOME", "PYENV_ROOT", "PYENV_VERSION", "LANG", "TMPDIR"] { childEnvironment[key] = inherited[key] }
    childEnvironment.merge(environment) { $1 }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    process.environment = childEnvironment
    let output = Pipe(), errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let watchdog = DispatchWorkItem { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
    DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
    let errorData = DataBox()
    let errorsRead = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
        errorData.set(errors.fileHandleForReading.readDataToEndOfFile())
        errorsRead.signal()
    }
    let out = output.fileHandleForReading.readDataToEndOfFile()
    errorsRead.wait()
    process.waitUntilExit()
    watchdog.cancel()
    return ClientRun(
        status: process.terminationStatus, stdout: String(decoding: out, as: UTF8.self),
        stderr: String(decoding: errorData.get(), as: UTF8.self))
}

/// A lock-protected buffer (stderr is read on another queue).
private final class DataBox: @unchecked Sendable {
    private var value = Data()
    private let lock = NSLock()
    func set(_ newValue: Data) { lock.withLock { value = newValue } }
    func get() -> Data { lock.withLock { value } }
}

/// The scope every plain-HTTP recipe runs against: `origin` gets `Authorization: Bearer <canary>`.
private final class PlainSetup {
    let origin: FixtureOrigin
    let proxy: ProxyProcess
    let scratch = ScratchDirectory()
    let token = "CANARY-recipe-\(UInt32.random(in: 0...UInt32.max))"
    var proxyURL: String { "http://127.0.0.1:\(proxy.port)" }

    init(proxyAuth password: String? = nil) throws {
        origin = try FixtureOrigin()
        var secrets = "demo_token: { env: DEMO_TOKEN }"
        var environment = ["DEMO_TOKEN": token]
        if let password {
            secrets += ", proxy_password: { env: PROXY_PASSWORD }"
            environment["PROXY_PASSWORD"] = password
        }
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { \(secrets) }
            \(password == nil ? "" : "proxy_auth: { secret: proxy_password }")
            scopes:
              - name: local
                origins: ["\(origin.url)"]
                require_https: false
                inject: { Authorization: "Bearer ${demo_token}" }
            """)
        proxy = try ProxyProcess(arguments: ["--config", config], environment: environment)
    }

    deinit {
        proxy.terminate()
        origin.stop()
    }

    /// What the origin received for the one request a recipe sent.
    func received() -> TestRequest? {
        #expect(origin.requests.count == 1, "one request reached the origin")
        return origin.requests.last
    }

    /// The origin got the injected token, and the proxy's request id: the request went through scopeproxy.
    func expectProxied(_ run: ClientRun, _ recipe: Comment) {
        #expect(run.status == 0, "\(recipe): exit \(run.status), stderr: \(run.stderr)")
        let request = received()
        #expect(request?.header("authorization") == "Bearer \(token)", recipe)
        #expect(request?.header("x-request-id") != nil, recipe)
    }
}

@Suite("Client recipes: plain HTTP through the binary, as the docs write them", .serialized)
struct PlainClientRecipeTests {
    @Test("curl -x http://PROXY URL")
    func curlDashX() throws {
        let setup = try PlainSetup()
        let run = try runClient(["curl", "-sS", "--max-time", "10", "-x", setup.proxyURL, "\(setup.origin.url)/v1/books"], environment: [:])
        setup.expectProxied(run, "curl -x")
    }

    @Test("curl reads lowercase http_proxy")
    func curlLowercaseEnvironment() throws {
        let setup = try PlainSetup()
        let run = try runClient(
            ["curl", "-sS", "--max-time", "10", "\(setup.origin.url)/v1/books"],
            environment: ["http_proxy": setup.proxyURL])
        setup.expectProxied(run, "http_proxy=... curl")
    }

    @Test("curl ignores uppercase HTTP_PROXY alone: the request goes direct and gets no token")
    func curlIgnoresUppercase() throws {
        let setup = try PlainSetup()
        let run = try runClient(
            ["curl", "-sS", "--max-time", "10", "\(setup.origin.url)/v1/books"],
            environment: ["HTTP_PROXY": setup.proxyURL])
        #expect(run.status == 0, "the origin answered curl directly")
        let request = setup.received()
        #expect(request?.header("authorization") == nil, "nothing injected: the proxy never saw it")
        #expect(request?.header("x-request-id") == nil, "no proxy request id: it went direct")
    }

    @Test("python-requests reads HTTP_PROXY")
    func pythonRequests() throws {
        let setup = try PlainSetup()
        let run = try runClient(
            [
                "python3", "-c", "import requests, sys; print(requests.get(sys.argv[1], timeout=10).status_code)",
                "\(setup.origin.url)/v1/books",
            ],
            environment: ["HTTP_PROXY": setup.proxyURL])
        setup.expectProxied(run, "HTTP_PROXY=... python-requests")
        #expect(run.stdout == "200\n")
    }

    @Test("httpx reads HTTP_PROXY (trust_env, the default)")
    func httpx() throws {
        let setup = try PlainSetup()
        let run = try runClient(
            [
                "python3", "-c", "import httpx, sys; print(httpx.get(sys.argv[1], timeout=10).status_code)",
                "\(setup.origin.url)/v1/books",
            ],
            environment: ["HTTP_PROXY": setup.proxyURL])
        setup.expectProxied(run, "HTTP_PROXY=... httpx")
        #expect(run.stdout == "200\n")
    }

    @Test("Node's built-in http.request: proxy host and port, absolute URL as the path (docs/recipes/node-http.js)")
    func nodeHTTP() throws {
        let setup = try PlainSetup()
        let run = try runClient(["node", recipe("node-http.js"), "\(setup.origin.url)/v1/books", setup.proxyURL], environment: [:])
        setup.expectProxied(run, "node node-http.js")
        #expect(run.stdout.hasPrefix("200 "))
    }

    @Test("with proxy_auth: curl and python-requests put the password in the proxy URL")
    func proxyAuthentication() throws {
        let password = "proxy-\(UInt32.random(in: 0...UInt32.max))"
        let setup = try PlainSetup(proxyAuth: password)
        let withPassword = "http://any:\(password)@127.0.0.1:\(setup.proxy.port)"

        let refused = try runClient(
            [
                "curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-x", setup.proxyURL,
                "\(setup.origin.url)/v1/books",
            ], environment: [:])
        #expect(refused.stdout == "407", "no password: 407")
        #expect(setup.origin.requests.isEmpty)

        let curl = try runClient(["curl", "-sS", "--max-time", "10", "-x", withPassword, "\(setup.origin.url)/v1/books"], environment: [:])
        setup.expectProxied(curl, "curl -x http://any:PASSWORD@PROXY")
        let python = try runClient(
            [
                "python3", "-c", "import requests, sys; print(requests.get(sys.argv[1], timeout=10).status_code)",
                "\(setup.origin.url)/v1/books",
            ],
            environment: ["HTTP_PROXY": withPassword])
        #expect(python.stdout == "200\n", "python-requests: \(python.stderr)")
        #expect(setup.origin.requests.count == 2)
        #expect(setup.origin.requests.allSatisfy { $0.header("proxy-authorization") == nil }, "the proxy password is never forwarded")
    }
}

/// The HTTPS recipes: a loopback HTTPS origin with its own CA (trusted by the proxy as
/// `upstream_ca`), intercepted with scopeproxy's local CA, which each client is told to trust.
private final class HTTPSSetup {
    let pki: TestPKI
    let origin: HTTPSOrigin
    let proxy: ProxyProcess
    let scratch = ScratchDirectory()
    let token = "CANARY-recipe-tls-\(UInt32.random(in: 0...UInt32.max))"
    var proxyURL: String { "http://127.0.0.1:\(proxy.port)" }
    var url: String { "https://localhost:\(origin.port)/v1/me" }
    let caPath: String

    init() throws {
        pki = try TestPKI()
        origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { demo_token: { env: DEMO_TOKEN } }
            scopes:
              - name: secure
                origins: ["https://localhost:\(origin.port)"]
                inject: { Authorization: "Bearer ${demo_token}" }
            tls: { intercept: scoped, ca_dir: ca, upstream_ca: \(pki.caPath) }
            """)
        // The recipe's first step: `scopeproxy ca --config FILE > scopeproxy-ca.pem`.
        let ca = try ProxyProcess.runToCompletion(["ca", "--config", config])
        #expect(ca.status == 0, "scopeproxy ca: \(ca.stderr)")
        caPath = scratch.write("scopeproxy-ca.pem", ca.stdout, mode: 0o644)
        proxy = try ProxyProcess(arguments: ["--config", config], environment: ["DEMO_TOKEN": token])
    }

    deinit {
        proxy.terminate()
        origin.stop()
    }

    func expectInjected(_ run: ClientRun, _ recipe: Comment) {
        #expect(run.status == 0, "\(recipe): exit \(run.status), stderr: \(run.stderr)")
        #expect(origin.received.count == 1, recipe)
        #expect(origin.received.last?.contains("\"Authorization\": \"Bearer \(token)\"") == true, recipe)
    }
}

@Suite("Client recipes: HTTPS through the binary, trusting the local CA, as the docs write them", .serialized)
struct HTTPSClientRecipeTests {
    @Test("curl: HTTPS_PROXY and CURL_CA_BUNDLE")
    func curlEnvironment() throws {
        let setup = try HTTPSSetup()
        let run = try runClient(
            ["curl", "-sS", "--max-time", "10", setup.url],
            environment: ["HTTPS_PROXY": setup.proxyURL, "CURL_CA_BUNDLE": setup.caPath])
        setup.expectInjected(run, "HTTPS_PROXY=... CURL_CA_BUNDLE=... curl")
    }

    @Test("curl: lowercase https_proxy works too, and --cacert with -x")
    func curlOtherForms() throws {
        let setup = try HTTPSSetup()
        let lowercase = try runClient(
            ["curl", "-sS", "--max-time", "10", setup.url],
            environment: ["https_proxy": setup.proxyURL, "CURL_CA_BUNDLE": setup.caPath])
        #expect(lowercase.status == 0, "https_proxy: \(lowercase.stderr)")
        let explicit = try runClient(
            ["curl", "-sS", "--max-time", "10", "--cacert", setup.caPath, "-x", setup.proxyURL, setup.url],
            environment: [:])
        #expect(explicit.status == 0, "--cacert -x: \(explicit.stderr)")
        #expect(setup.origin.received.count == 2)
        #expect(setup.origin.received.allSatisfy { $0.contains("\"Authorization\": \"Bearer \(setup.token)\"") })
    }

    @Test("curl without the CA fails verification: the recipe's CA step is what makes it work")
    func curlWithoutCA() throws {
        let setup = try HTTPSSetup()
        let run = try runClient(["curl", "-sS", "--max-time", "10", setup.url], environment: ["HTTPS_PROXY": setup.proxyURL])
        #expect(run.status == 60, "curl: (60) SSL certificate problem")
        #expect(setup.origin.received.isEmpty)
    }

    @Test("python-requests: HTTPS_PROXY and REQUESTS_CA_BUNDLE")
    func pythonRequests() throws {
        let setup = try HTTPSSetup()
        let run = try runClient(
            ["python3", "-c", "import requests, sys; print(requests.get(sys.argv[1], timeout=10).status_code)", setup.url],
            environment: ["HTTPS_PROXY": setup.proxyURL, "REQUESTS_CA_BUNDLE": setup.caPath])
        setup.expectInjected(run, "HTTPS_PROXY=... REQUESTS_CA_BUNDLE=... python-requests")
    }

    @Test("httpx: HTTPS_PROXY and SSL_CERT_FILE")
    func httpx() throws {
        let setup = try HTTPSSetup()
        let run = try runClient(
            ["python3", "-c", "import httpx, sys; print(httpx.get(sys.argv[1], timeout=10).status_code)", setup.url],
            environment: ["HTTPS_PROXY": setup.proxyURL, "SSL_CERT_FILE": setup.caPath])
        setup.expectInjected(run, "HTTPS_PROXY=... SSL_CERT_FILE=... httpx")
    }

    @Test("Node: CONNECT then TLS with built-in modules, NODE_EXTRA_CA_CERTS (docs/recipes/node-https.js)")
    func nodeHTTPS() throws {
        let setup = try HTTPSSetup()
        let run = try runClient(
            ["node", recipe("node-https.js"), setup.url, setup.proxyURL],
            environment: ["NODE_EXTRA_CA_CERTS": setup.caPath])
        setup.expectInjected(run, "NODE_EXTRA_CA_CERTS=... node node-https.js")
        #expect(run.stdout.hasPrefix("200 "))
    }
}
