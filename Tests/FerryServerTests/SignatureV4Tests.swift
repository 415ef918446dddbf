import Foundation
import Testing

@testable import FerryServer

/// AWS Signature Version 4 against AWS's published examples: the signature test suite's
/// `get-vanilla`, and the S3 documentation's signed GET with a range and PUT with a body.
@Suite("Signature V4")
struct SignatureV4Tests {
    static func date(_ text: String) -> Date {
        ISO8601DateFormatter().date(from: text)!
    }

    @Test("the signature test suite's get-vanilla")
    func getVanilla() {
        let signer = SignatureV4(
            accessKey: "AKIDEXAMPLE",
            secretKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
            service: "service"
        )
        let authorization = signer.authorization(
            method: "GET",
            path: "/",
            headers: ["Host": "example.amazonaws.com", "X-Amz-Date": "20150830T123600Z"],
            payloadHash: SignatureV4.emptyPayloadHash,
            date: Self.date("2015-08-30T12:36:00Z")
        )
        #expect(
            authorization
                == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, "
                + "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        )
    }

    @Test("S3's documented GET of a range and PUT of a body")
    func s3Examples() {
        let signer = SignatureV4(accessKey: "AKIAIOSFODNN7EXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", region: "us-east-1")
        let date = Self.date("2013-05-24T00:00:00Z")
        #expect(SignatureV4.timestamp(date) == "20130524T000000Z")
        let get = signer.authorization(
            method: "GET",
            path: "/test.txt",
            headers: [
                "host": "examplebucket.s3.amazonaws.com", "range": "bytes=0-9", "x-amz-content-sha256": SignatureV4.emptyPayloadHash,
                "x-amz-date": "20130524T000000Z",
            ],
            payloadHash: SignatureV4.emptyPayloadHash,
            date: date
        )
        #expect(get.hasSuffix("Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"), "\(get)")
        let body = "Welcome to Amazon S3."
        let bodyHash = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        let put = signer.authorization(
            method: "PUT",
            path: "/" + SignatureV4.encoded("test$file.text"),
            headers: [
                "Host": "examplebucket.s3.amazonaws.com", "Date": "Fri, 24 May 2013 00:00:00 GMT", "x-amz-date": "20130524T000000Z",
                "x-amz-storage-class": "REDUCED_REDUNDANCY", "x-amz-content-sha256": bodyHash,
            ],
            payloadHash: bodyHash,
            date: date
        )
        #expect(body.utf8.count == 21)
        #expect(put.hasSuffix("Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"), "\(put)")
    }
}
