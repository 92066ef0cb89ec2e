import Foundation
import Testing

@testable import ScopeConfig

/// Navigation helpers over the YAML layer the config loader uses.
extension YAMLNode {
    fileprivate subscript(_ key: String) -> YAMLNode? {
        guard case .mapping(let pairs) = value else { return nil }
        return pairs.first { if case .scalar(let name, _) = $0.key.value { name == key } else { false } }?.value
    }
    fileprivate subscript(_ index: Int) -> YAMLNode? {
        guard case .sequence(let items) = value, index < items.count else { return nil }
        return items[index]
    }
    fileprivate var items: [YAMLNode] { if case .sequence(let items) = value { items } else { [] } }
    fileprivate var text: String? { if case .scalar(let text, _) = value { text } else { nil } }
}

private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

private func load(_ name: String) throws -> YAMLNode {
    let path = root.appendingPathComponent("config/kubernetes/\(name)").path
    return try YAMLDocument.parse(try String(contentsOfFile: path, encoding: .utf8), file: path)
}

@Suite("The Kubernetes example parses and agrees with the config schema")
struct KubernetesExampleTests {
    @Test("native sidecar, proxy env, fsGroup secrets with allow_group_read, readiness on health, shared CA")
    func deployment() throws {
        let deployment = try load("deployment.yaml")
        let configMap = try load("scopeproxy-config.yaml")
        #expect(deployment["apiVersion"]?.text == "apps/v1")
        #expect(deployment["kind"]?.text == "Deployment")
        let pod = try #require(deployment["spec"]?["template"]?["spec"])
        #expect(pod["securityContext"]?["fsGroup"]?.text == "10001")
        let sidecar = try #require(pod["initContainers"]?[0])
        #expect(sidecar["restartPolicy"]?.text == "Always", "a native sidecar")
        for probe in ["startupProbe", "readinessProbe"] {
            #expect(sidecar[probe]?["exec"]?["command"]?.items.map(\.text) == ["/usr/local/bin/scopeproxy", "health"], "\(probe)")
        }
        let app = try #require(pod["containers"]?[0])
        let env = Dictionary(
            uniqueKeysWithValues: app["env"]!.items.compactMap { item in
                item["name"]?.text.map { ($0, item["value"]?.text ?? "") }
            })

        // The embedded scopeproxy config is valid and matches the pod.
        #expect(configMap["kind"]?.text == "ConfigMap")
        let configText = try #require(configMap["data"]?["config.yaml"]?.text)
        let config = try ConfigLoader.parse(configText, file: "config.yaml", home: "/nonexistent")
        #expect(env["HTTP_PROXY"] == "http://\(config.listen)")
        #expect(env["HTTPS_PROXY"] == "http://\(config.listen)")
        #expect(env["NO_PROXY"]?.contains("127.0.0.1") == true)
        #expect(config.admin != nil, "`scopeproxy health` needs an admin address")

        let volumes = Dictionary(uniqueKeysWithValues: pod["volumes"]!.items.compactMap { item in item["name"]?.text.map { ($0, item) } })
        let mounts = Dictionary(
            uniqueKeysWithValues: sidecar["volumeMounts"]!.items.compactMap { item in
                item["name"]?.text.map { ($0, item["mountPath"]?.text ?? "") }
            })
        #expect(volumes["scopeproxy-config"]?["configMap"]?["name"]?.text == configMap["metadata"]?["name"]?.text)
        #expect(mounts["scopeproxy-config"].map { "\($0)/config.yaml" } == sidecar["env"]?[0]?["value"]?.text)
        #expect(volumes["library-secrets"]?["secret"] != nil)
        for (name, source) in config.secrets {
            guard case .file(let path, let allowGroupRead) = source else { Issue.record("\(name) should be a mounted file"); continue }
            #expect(allowGroupRead, "\(name): fsGroup mounts are group-readable")
            #expect(path.hasPrefix(mounts["library-secrets"]! + "/"), "\(name) lives in the mounted Secret")
        }
        #expect(config.tls.caDirectory == mounts["scopeproxy-ca"], "the CA is written where the app reads it")
        #expect(env["SSL_CERT_FILE"] == config.tls.caDirectory + "/scopeproxy-ca.pem")
        #expect(volumes["scopeproxy-ca"]?["emptyDir"] != nil)
    }

    @Test("images a locally loaded build can satisfy: imagePullPolicy IfNotPresent or Never on every container")
    func pullPolicy() throws {
        let pod = try #require(try load("deployment.yaml")["spec"]?["template"]?["spec"])
        let containers = (pod["initContainers"]?.items ?? []) + (pod["containers"]?.items ?? [])
        #expect(containers.count == 2)
        for container in containers {
            // Without it, an image tagged :latest is pulled Always, and a `kind load` image is never used.
            #expect(["IfNotPresent", "Never"].contains(container["imagePullPolicy"]?.text ?? ""), "\(container["name"]?.text ?? "?")")
        }
    }

    @Test("the Secret exists, is the one mounted, and has a key for every file secret of the config")
    func secret() throws {
        let secret = try load("secret.yaml")
        let deployment = try load("deployment.yaml")
        let configMap = try load("scopeproxy-config.yaml")
        #expect(secret["apiVersion"]?.text == "v1")
        #expect(secret["kind"]?.text == "Secret")
        let pod = try #require(deployment["spec"]?["template"]?["spec"])
        let volume = try #require(pod["volumes"]?.items.first { $0["name"]?.text == "library-secrets" })
        #expect(volume["secret"]?["secretName"]?.text == secret["metadata"]?["name"]?.text)
        let keys: [String]
        if case .mapping(let pairs) = (secret["stringData"] ?? secret["data"])?.value {
            keys = pairs.compactMap(\.key.text)
        } else {
            keys = []
        }
        let sidecar = try #require(pod["initContainers"]?[0])
        let mountPath = try #require(sidecar["volumeMounts"]?.items.first { $0["name"]?.text == "library-secrets" }?["mountPath"]?.text)
        let config = try ConfigLoader.parse(try #require(configMap["data"]?["config.yaml"]?.text), file: "config.yaml", home: "/nonexistent")
        #expect(!config.secrets.isEmpty)
        for (name, source) in config.secrets {
            guard case .file(let path, _) = source else { continue }
            #expect(path.hasPrefix(mountPath + "/"), "\(name)")
            #expect(keys.contains(String(path.dropFirst(mountPath.count + 1))), "the Secret has a key for \(name)'s file")
        }
    }

    @Test("Prometheus can scrape the sidecar: admin on the pod's addresses, its port declared and annotated")
    func metricsScrape() throws {
        let deployment = try load("deployment.yaml")
        let configMap = try load("scopeproxy-config.yaml")
        let config = try ConfigLoader.parse(try #require(configMap["data"]?["config.yaml"]?.text), file: "config.yaml", home: "/nonexistent")
        let admin = try #require(config.admin)
        // Loopback would answer `scopeproxy health` inside the pod but never a scraper on the pod IP.
        #expect(["0.0.0.0", "::"].contains(admin.host), "admin listens beyond loopback")
        #expect(config.listen.host == "127.0.0.1", "the proxy port itself stays loopback-only")
        let annotations = try #require(deployment["spec"]?["template"]?["metadata"]?["annotations"])
        #expect(annotations["prometheus.io/scrape"]?.text == "true")
        #expect(annotations["prometheus.io/port"]?.text == String(admin.port))
        #expect(annotations["prometheus.io/path"]?.text == "/metrics")
        let sidecar = try #require(deployment["spec"]?["template"]?["spec"]?["initContainers"]?[0])
        #expect(sidecar["ports"]?.items.contains { $0["containerPort"]?.text == String(admin.port) } == true)
    }
}
