import Digests
import HTTP1Codec
import JSONText
import ScopePolicy

/// The JWT a GitHub App authenticates as itself with (docs.github.com, "Generating a JSON Web Token
/// (JWT) for a GitHub App"): RS256, `iat` 60 seconds in the past "to allow for clock drift", `exp`
/// no more than 10 minutes into the future, `iss` the app's client ID or app ID. Pure: the clock is
/// the caller's.
public enum GitHubAppJWT {
    /// Seconds `iat` is set back from now (GitHub's own advice, for clock drift).
    public static let issuedAtBackdate: Int64 = 60
    /// Seconds `exp` lies after now: 9 minutes, so `exp - iat` is GitHub's 10-minute maximum and a
    /// clock slightly ahead of GitHub's stays under it.
    public static let expiresAfter: Int64 = 540

    /// `appID`: the numeric app ID (sent as a JSON number, as GitHub's examples do) or the client
    /// ID (`Iv1.abc123`, a string).
    public static func make(appID: String, key: SigningKey, now: Int64) throws(SigningKeyError) -> String {
        guard key.algorithm == .rs256 else { throw .gitHubAppNeedsRSA }
        let claims: [(String, JWTClaim)] = [
            ("iat", .integer(saturatingAdd(now, -issuedAtBackdate))),
            ("exp", .integer(saturatingAdd(now, expiresAfter))),
            ("iss", issuer(appID)),
        ]
        return try JWT.sign(claims: claims, key: key, algorithm: .rs256, keyID: nil)
    }

    /// A number when all digits (at most 18, so it fits Int64; no leading zero, which JSON numbers
    /// cannot have), else a string.
    static func issuer(_ appID: String) -> JWTClaim {
        let digits = Array(appID.utf8)
        guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), digits.count == 1 || digits[0] != 0x30,
            let number = Int64(appID)
        else { return .string(appID) }
        return .integer(number)
    }
}

/// `POST /app/installations/{installation_id}/access_tokens` (docs.github.com REST, "Create an
/// installation access token for an app"), authenticated with the App JWT. The request may narrow
/// the token to some repositories and permissions; an empty list asks for all the installation has.
public enum GitHubInstallationTokenRequest {
    /// The REST API version this request is written against (docs.github.com, "API Versions").
    public static let apiVersion = "2022-11-28"

    /// `pathPrefix`: "" for api.github.com, "/api/v3" for GitHub Enterprise Server. A trailing "/"
    /// is dropped; the installation ID is percent-encoded into the path (config checks it is digits).
    public static func make(
        api: Origin, pathPrefix: String, installationID: String, jwt: String, permissions: [(String, String)], repositories: [String]
    ) -> [UInt8] {
        var prefix = pathPrefix
        while prefix.hasSuffix("/") { prefix.removeLast() }
        if !prefix.isEmpty, !prefix.hasPrefix("/") { prefix = "/" + prefix }
        let target = prefix + "/app/installations/" + PercentEncoding.encode(Array(installationID.utf8)) + "/access_tokens"
        var body = JSONLine()
        if !repositories.isEmpty { body.array("repositories", repositories) }
        if !permissions.isEmpty {
            body.beginObject("permissions")
            for (name, level) in permissions { body.string(name, level) }
            body.endObject()
        }
        let bodyBytes = body.finish()
        var fields = HTTPFields()
        fields.append(name: "Host", value: api.authority)
        fields.append(name: "Authorization", value: "Bearer " + jwt)
        fields.append(name: "Accept", value: "application/vnd.github+json")
        fields.append(name: "X-GitHub-Api-Version", value: apiVersion)
        // GitHub refuses API requests without a User-Agent (docs.github.com, "Getting started with
        // the REST API": "requests with no User-Agent header will be rejected").
        fields.append(name: "User-Agent", value: "scopeproxy")
        fields.append(name: "Content-Type", value: "application/json")
        fields.append(name: "Content-Length", value: String(bodyBytes.count))
        // One exchange per connection, as the OAuth2 token request does.
        fields.append(name: "Connection", value: "close")
        return RequestHead(method: "POST", target: target, version: .http1_1, fields: fields).serialized() + bodyBytes
    }
}

public enum GitHubInstallationTokenResponse {
    /// The most a token may be: GitHub's are 40 (`ghs_` + 36) characters today; anything past 4 KiB
    /// is not a token.
    public static let maxTokenBytes = 4096

    /// 201 Created (what GitHub answers; 200 accepted too) with `token` and `expires_at` (RFC 3339,
    /// as seconds since the epoch). 401 (the JWT refused: wrong key, app ID or clock), 403, 404 (no
    /// such installation) and 422 (permissions the installation lacks) are `.rejected`; any other
    /// status is `.unexpectedStatus`. No reason carries a byte of the body.
    public static func parse(status: Int, body: [UInt8]) -> Result<(token: SecretValue, expiresAt: Int64), TokenFailure.Reason> {
        guard status == 201 || status == 200 else {
            if [401, 403, 404, 422].contains(status) { return .failure(.rejected(status: status, error: nil)) }
            return .failure(.unexpectedStatus(status))
        }
        let json: TokenJSON
        do { json = try TokenJSON.parse(body) } catch { return .failure(.malformedResponse(error.reason)) }
        guard case .object(let members) = json else { return .failure(.malformedResponse("not a JSON object")) }
        guard case .string(let token)? = members["token"] else { return .failure(.malformedResponse("no token string")) }
        // Visible ASCII only: the token goes into an Authorization field (no CR, LF, space or NUL).
        guard !token.isEmpty, token.count <= maxTokenBytes, token.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(.malformedResponse("token is not visible ASCII"))
        }
        guard case .string(let expires)? = members["expires_at"] else { return .failure(.malformedResponse("no expires_at string")) }
        guard expires.count <= 64, let expiresAt = RFC3339.secondsSinceEpoch(String(decoding: expires, as: UTF8.self)) else {
            return .failure(.malformedResponse("expires_at is not an RFC 3339 timestamp"))
        }
        return .success((SecretValue(bytes: token), expiresAt))
    }
}

/// JWTs as OAuth 2.0 grants and client credentials (RFC 7523). Pure: the time and the `jti` are the
/// caller's (the fetcher passes its clock and `jti(random:)` of fresh random bytes).
public enum JWTBearer {
    /// RFC 7523 §2.1.
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// RFC 7523 §2.2.
    public static let clientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    /// `exp - iat`: RFC 7523 §3 wants an expiry "limiting the time window"; Google caps assertions at
    /// one hour, Okta and Entra ID accept short ones. Five minutes is enough for one exchange.
    public static let lifetime: Int64 = 300

    /// An RFC 7523 §2.1 grant assertion: `iss`, `sub` (§3 requires it; the issuer itself when the
    /// caller names no subject, as for a Google service account without domain-wide delegation),
    /// `aud` (the authorization server: Google wants its token URL), `iat`, `exp`, `jti`, and `scope`
    /// when given (Google service accounts read the scope from the assertion; the form carries it too).
    public static func assertion(
        issuer: String, subject: String?, audience: String, scope: String?, key: SigningKey, algorithm: JWTAlgorithm, keyID: String?,
        now: Int64, jti: String
    ) throws(SigningKeyError) -> String {
        var claims: [(String, JWTClaim)] = [
            ("iss", .string(issuer)),
            ("sub", .string(subject ?? issuer)),
            ("aud", .string(audience)),
            ("iat", .integer(now)),
            ("exp", .integer(saturatingAdd(now, lifetime))),
            ("jti", .string(jti)),
        ]
        if let scope { claims.append(("scope", .string(scope))) }
        return try JWT.sign(claims: claims, key: key, algorithm: algorithm, keyID: keyID)
    }

    /// The token request's form for the §2.1 grant (scope per RFC 6749 §3.3, when given).
    public static func grantForm(assertion: String, scope: String?) -> [(String, [UInt8])] {
        var form: [(String, [UInt8])] = [("grant_type", Array(grantType.utf8)), ("assertion", Array(assertion.utf8))]
        if let scope { form.append(("scope", Array(scope.utf8))) }
        return form
    }

    /// RFC 7523 §2.2 client authentication (OpenID Connect Core §9 `private_key_jwt`): the form
    /// fields to add to any token request in place of a client secret. The assertion's `iss` and
    /// `sub` are the client ID, `aud` the token endpoint URL (§3: the authorization server; OIDC
    /// §9 names the token endpoint). `client_id` goes along too (RFC 7521 §4.2: optional, but
    /// several servers look the client up by it before they read the assertion).
    public static func clientAssertionFields(
        clientID: String, tokenURL: String, key: SigningKey, algorithm: JWTAlgorithm, keyID: String?, now: Int64, jti: String
    ) throws(SigningKeyError) -> [(String, [UInt8])] {
        let claims: [(String, JWTClaim)] = [
            ("iss", .string(clientID)),
            ("sub", .string(clientID)),
            ("aud", .string(tokenURL)),
            ("iat", .integer(now)),
            ("exp", .integer(saturatingAdd(now, lifetime))),
            ("jti", .string(jti)),
        ]
        let assertion = try JWT.sign(claims: claims, key: key, algorithm: algorithm, keyID: keyID)
        return [
            ("client_assertion_type", Array(clientAssertionType.utf8)),
            ("client_assertion", Array(assertion.utf8)),
            ("client_id", Array(clientID.utf8)),
        ]
    }

    /// A `jti` (RFC 7519 §4.1.7, unique per assertion) from the caller's random bytes (16 make
    /// collisions negligible): base64url, so it needs no escaping anywhere.
    public static func jti(random: [UInt8]) -> String { JWT.base64URL(random) }

    /// A form as `application/x-www-form-urlencoded` bytes (RFC 6749 Appendix B), `&`-joined in order.
    public static func formBody(_ form: [(String, [UInt8])]) -> [UInt8] {
        Array(form.map { FormEncoding.encode(Array($0.0.utf8)) + "=" + FormEncoding.encode($0.1) }.joined(separator: "&").utf8)
    }
}

/// `a + b`, held at the Int64 bounds instead of trapping: the clock is input too.
private func saturatingAdd(_ a: Int64, _ b: Int64) -> Int64 {
    let (sum, overflow) = a.addingReportingOverflow(b)
    guard overflow else { return sum }
    return b > 0 ? .max : .min
}
