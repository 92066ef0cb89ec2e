import HTTP1Codec
import ScopePolicy

/// The token request (RFC 6749 §4.4.2, §6) as bytes to send: a head and a form body. Built on the
/// fetcher's thread from the current secret values; never logged.
public struct OAuth2TokenRequest: Sendable {
    public let head: RequestHead
    /// `application/x-www-form-urlencoded` (RFC 6749 Appendix B).
    public let body: [UInt8]

    /// The head and body on the wire, ready to write.
    public var wireBytes: [UInt8] { head.serialized() + body }

    /// The signed JWTs a request carries: the `jwt_bearer` grant's assertion (RFC 7523 §2.1), and
    /// for `private_key_jwt` the client assertion (§2.2). Signed by the fetcher, which holds the key.
    public struct Assertions: Sendable {
        public var grant: String?
        public var client: String?
        public init(grant: String? = nil, client: String? = nil) {
            self.grant = grant
            self.client = client
        }
    }

    /// `clientSecret` is required for basic and body authentication, `refreshToken` for the
    /// refresh-token grant, `assertions` for `jwt_bearer` and `private_key_jwt`; each is ignored otherwise.
    public static func make(
        _ spec: OAuth2Spec, clientSecret: SecretValue?, refreshToken: SecretValue?, assertions: Assertions = Assertions()
    ) -> OAuth2TokenRequest {
        var form: [(String, [UInt8])] = [("grant_type", Array(spec.grant.grantType.utf8))]
        // What each grant adds to the form: a new grant kind does not compile until it says.
        switch spec.grant {
        case .clientCredentials:
            break
        case .refreshToken:
            if let refreshToken { form.append(("refresh_token", refreshToken.exposedBytes)) }
        case .jwtBearer:
            if let assertion = assertions.grant { form.append(("assertion", Array(assertion.utf8))) }
        }
        if let scope = spec.scope { form.append(("scope", Array(scope.utf8))) }
        if let audience = spec.audience { form.append(("audience", Array(audience.utf8))) }
        var fields = HTTPFields()
        fields.append(name: "Host", value: spec.endpoint.authority)
        let clientID = Array((spec.clientID ?? "").utf8)
        switch spec.clientAuthentication {
        case .basic:
            // RFC 6749 §2.3.1: client_id and secret are each form-urlencoded (Appendix B) before
            // they are joined with ":" and base64-encoded: a ":" in the id stays unambiguous.
            let credentials =
                Array(FormEncoding.encode(clientID).utf8) + [UInt8(ascii: ":")]
                + Array(FormEncoding.encode(clientSecret?.exposedBytes ?? []).utf8)
            fields.append(name: "Authorization", value: "Basic " + Base64.encode(credentials))
        case .body:
            // RFC 6749 §2.3.1 allows the pair in the body (not recommended, but some servers want it).
            form.append(("client_id", clientID))
            form.append(("client_secret", clientSecret?.exposedBytes ?? []))
        case .privateKeyJWT:
            // RFC 7523 §2.2 with RFC 7521 §4.2: the assertion authenticates; client_id names the client.
            form.append(("client_id", clientID))
            form.append(("client_assertion_type", Array("urn:ietf:params:oauth:client-assertion-type:jwt-bearer".utf8)))
            if let client = assertions.client { form.append(("client_assertion", Array(client.utf8))) }
        case .none:
            if spec.clientID != nil { form.append(("client_id", clientID)) }
        }
        let body = Array(form.map { FormEncoding.encode(Array($0.0.utf8)) + "=" + FormEncoding.encode($0.1) }.joined(separator: "&").utf8)
        fields.append(name: "Content-Type", value: "application/x-www-form-urlencoded")
        fields.append(name: "Content-Length", value: String(body.count))
        fields.append(name: "Accept", value: "application/json")
        // One exchange per connection: the response ends where the connection or framing says.
        fields.append(name: "Connection", value: "close")
        fields.append(name: "User-Agent", value: "scopeproxy")
        let head = RequestHead(method: "POST", target: spec.path, version: .http1_1, fields: fields)
        return OAuth2TokenRequest(head: head, body: body)
    }
}

/// `application/x-www-form-urlencoded` serialization (WHATWG URL §5.2, which HTML 4.01 §17.13.4 that
/// RFC 6749 Appendix B cites grew into): ASCII alphanumerics and `*-._` as they are, space as `+`,
/// every other byte as `%XX`.
public enum FormEncoding {
    public static func encode(_ bytes: [UInt8]) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "*"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"):
                output.append(byte)
            case UInt8(ascii: " "):
                output.append(UInt8(ascii: "+"))
            default:
                output += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: output, as: UTF8.self)
    }
}
