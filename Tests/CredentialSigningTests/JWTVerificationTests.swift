import Digests
import Foundation
import ProxyCore
import TestSupport
import Testing

/// Every JWT the proxy makes, checked by an independent implementation: pyjwt over cryptography
/// (Tests/Fixtures/jwt_verify.py) verifies the signature with the public key and exactly the
/// expected alg, and decodes the header and claims the tests compare.
@Suite struct JWTVerificationTests {
    let keys = TestKeys()
    let now: Int64 = 1_796_206_946

    @Test func pyjwtVerifiesEveryShape() throws {
        let rsaPKCS1 = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS1))
        let rsaPKCS8 = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS8))
        let ecSEC1 = try SigningKey.parsePEM(try keys.bytes(.ecSEC1))
        let ecPKCS8 = try SigningKey.parsePEM(try keys.bytes(.ecPKCS8))
        let odd = "quote \" backslash \\ newline \n tab \t é 🔑 </script>"
        var tokens: [(jwt: String, publicKey: String, alg: String)] = []
        var checks: [(header: [String: String], claims: [String: Any])] = []
        func add(_ jwt: String, _ kind: TestKeys.Kind, _ alg: String, header: [String: String], claims: [String: Any]) throws {
            tokens.append((jwt, try keys.publicKey(of: kind), alg))
            checks.append((header, claims))
        }

        try add(
            JWT.sign(
                claims: [("sub", .string(odd)), ("n", .integer(-5)), ("big", .integer(Int64.max))], key: rsaPKCS1, algorithm: .rs256, keyID: "k1"),
            .rsaPKCS1, "RS256", header: ["alg": "RS256", "typ": "JWT", "kid": "k1"], claims: ["sub": odd, "n": -5, "big": Int64.max])
        try add(
            GitHubAppJWT.make(appID: "123456", key: rsaPKCS1, now: now), .rsaPKCS1, "RS256", header: ["alg": "RS256", "typ": "JWT"],
            claims: ["iss": 123_456, "iat": now - 60, "exp": now + 540])
        try add(
            GitHubAppJWT.make(appID: "Iv1.8a61f9b3a7aba766", key: rsaPKCS8, now: now), .rsaPKCS8, "RS256",
            header: ["alg": "RS256", "typ": "JWT"], claims: ["iss": "Iv1.8a61f9b3a7aba766", "iat": now - 60, "exp": now + 540])
        // A leading zero is not a JSON number: the ID stays a string.
        try add(
            GitHubAppJWT.make(appID: "0123", key: rsaPKCS8, now: now), .rsaPKCS8, "RS256", header: ["alg": "RS256", "typ": "JWT"],
            claims: ["iss": "0123", "iat": now - 60, "exp": now + 540])
        try add(
            JWTBearer.assertion(
                issuer: "svc@project.iam.gserviceaccount.com", subject: nil, audience: "https://oauth2.googleapis.com/token",
                scope: "https://www.googleapis.com/auth/cloud-platform", key: rsaPKCS8, algorithm: .rs256, keyID: "abc123", now: now, jti: "j-1"),
            .rsaPKCS8, "RS256", header: ["alg": "RS256", "typ": "JWT", "kid": "abc123"],
            claims: [
                "iss": "svc@project.iam.gserviceaccount.com", "sub": "svc@project.iam.gserviceaccount.com",
                "aud": "https://oauth2.googleapis.com/token", "iat": now, "exp": now + 300, "jti": "j-1",
                "scope": "https://www.googleapis.com/auth/cloud-platform",
            ])
        try add(
            JWTBearer.assertion(
                issuer: "issuer-1", subject: "user@example.com", audience: "https://idp.example/token", scope: nil, key: ecSEC1,
                algorithm: .es256, keyID: nil, now: now, jti: "j-2"),
            .ecSEC1, "ES256", header: ["alg": "ES256", "typ": "JWT"],
            claims: ["iss": "issuer-1", "sub": "user@example.com", "aud": "https://idp.example/token", "iat": now, "exp": now + 300, "jti": "j-2"])
        let fields = try JWTBearer.clientAssertionFields(
            clientID: "client-7", tokenURL: "https://login.example/oauth2/token", key: ecPKCS8, algorithm: .es256, keyID: "kid-ec", now: now,
            jti: JWTBearer.jti(random: [UInt8](repeating: 0xFB, count: 16)))
        try add(
            String(decoding: fields[1].1, as: UTF8.self), .ecPKCS8, "ES256", header: ["alg": "ES256", "typ": "JWT", "kid": "kid-ec"],
            claims: [
                "iss": "client-7", "sub": "client-7", "aud": "https://login.example/oauth2/token", "iat": now, "exp": now + 300,
                "jti": "-_v7-_v7-_v7-_v7-_v7-w",
            ])
        // Many ES256 signatures: about one in 128 has an R or S shorter than 32 bytes, which must be
        // left-padded (RFC 7518 §3.4) or the verifier refuses it.
        for index in 0..<200 {
            try add(
                JWT.sign(claims: [("i", .integer(Int64(index)))], key: ecSEC1, algorithm: .es256, keyID: nil), .ecSEC1, "ES256",
                header: ["alg": "ES256", "typ": "JWT"], claims: ["i": index])
        }

        let verdicts = try PyJWTVerdict.verify(tokens)
        for (index, verdict) in verdicts.enumerated() {
            #expect(verdict.ok, "token \(index): \(verdict.why ?? "")")
            #expect(verdict.signatureLength == (tokens[index].alg == "RS256" ? 256 : 64), "token \(index)")
            #expect(verdict.header as NSDictionary == checks[index].header as NSDictionary, "token \(index)")
            #expect(verdict.claims as NSDictionary == checks[index].claims as NSDictionary, "token \(index)")
        }
    }

    /// The verifier verifies: another key's signature, a changed payload, and a lying alg are refused.
    @Test func pyjwtRefusesWhatIsWrong() throws {
        let rsa = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS1))
        let token = try JWT.sign(claims: [("sub", .string("a"))], key: rsa, algorithm: .rs256, keyID: nil)
        let parts = token.split(separator: ".").map(String.init)
        let tampered = parts[0] + "." + JWT.base64URL(Array(#"{"sub":"b"}"#.utf8)) + "." + parts[2]
        let verdicts = try PyJWTVerdict.verify([
            (token, try keys.publicKey(of: .rsaPKCS8), "RS256"),
            (tampered, try keys.publicKey(of: .rsaPKCS1), "RS256"),
            (token, try keys.publicKey(of: .rsaPKCS1), "ES256"),
            (token, try keys.publicKey(of: .rsaPKCS1), "RS256"),
        ])
        #expect(verdicts.map(\.ok) == [false, false, false, true])
    }

    @Test func gitHubAppRefusesAnECKey() throws {
        let ec = try SigningKey.parsePEM(try keys.bytes(.ecSEC1))
        #expect(throws: SigningKeyError.gitHubAppNeedsRSA) { try GitHubAppJWT.make(appID: "1", key: ec, now: now) }
        #expect(SigningKeyError.gitHubAppNeedsRSA.description == "GitHub App JWTs are RS256: the app's private key must be RSA (this one is EC)")
    }

    /// The clock is input: times at the ends of Int64 are held there, never a trap.
    @Test func extremeClocksDoNotTrap() throws {
        let rsa = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS1))
        for clock in [Int64.max, Int64.min, 0] {
            _ = try GitHubAppJWT.make(appID: "1", key: rsa, now: clock)
            _ = try JWTBearer.assertion(
                issuer: "i", subject: nil, audience: "a", scope: nil, key: rsa, algorithm: .rs256, keyID: nil, now: clock, jti: "j")
        }
    }

    @Test func base64URLHasNoPadding() {
        #expect(JWT.base64URL([]) == "")
        #expect(JWT.base64URL([0xFB]) == "-w")
        #expect(JWT.base64URL([0xFF, 0xEF]) == "_-8")
        #expect(JWT.base64URL(Array("{\"alg\":\"RS256\"}".utf8)) == "eyJhbGciOiJSUzI1NiJ9")
    }

    @Test func formsNameTheRFC7523Parameters() throws {
        #expect(
            JWTBearer.grantForm(assertion: "a.b.c", scope: "read write").map { "\($0.0)=\(String(decoding: $0.1, as: UTF8.self))" } == [
                "grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion=a.b.c", "scope=read write",
            ])
        #expect(JWTBearer.grantForm(assertion: "a.b.c", scope: nil).count == 2)
        #expect(
            String(decoding: JWTBearer.formBody(JWTBearer.grantForm(assertion: "a.b.c", scope: "read write")), as: UTF8.self)
                == "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b.c&scope=read+write")
        let ec = try SigningKey.parsePEM(try keys.bytes(.ecSEC1))
        let fields = try JWTBearer.clientAssertionFields(
            clientID: "c", tokenURL: "https://t.example/token", key: ec, algorithm: .es256, keyID: nil, now: now, jti: "j")
        #expect(fields.map(\.0) == ["client_assertion_type", "client_assertion", "client_id"])
        #expect(String(decoding: fields[0].1, as: UTF8.self) == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
        #expect(String(decoding: fields[2].1, as: UTF8.self) == "c")
    }
}
