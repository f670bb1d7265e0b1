internal import CBuildInfo

/// Where Klarna lives and who we are to it.
public struct KlarnaConfiguration: Sendable, CustomStringConvertible {
    public enum Region: String, Sendable, CaseIterable { case eu, na, oc }
    public enum Environment: String, Sendable, CaseIterable { case playground, production }

    /// Base URL of the legacy merchant APIs (`/hpp`, `/payments`, `/ordermanagement`), no trailing slash.
    public var baseURL: String
    /// Base URL of Klarna Network (`/v2/payment/requests`).
    public var networkBaseURL: String
    public var credentials: BasicCredentials

    public init(baseURL: String, networkBaseURL: String? = nil, credentials: BasicCredentials) {
        self.baseURL = Self.trimmed(baseURL)
        self.networkBaseURL = Self.trimmed(networkBaseURL ?? baseURL)
        self.credentials = credentials
    }

    public init(region: Region, environment: Environment, credentials: BasicCredentials) {
        self.init(
            baseURL: Self.baseURL(region: region, environment: environment),
            networkBaseURL: Self.networkBaseURL(environment: environment),
            credentials: credentials)
    }

    /// Klarna's regional hosts (api.klarna.com, api-na.klarna.com, api-oc.klarna.com and their playground twins).
    public static func baseURL(region: Region, environment: Environment) -> String {
        let prefix = region == .eu ? "api" : "api-\(region.rawValue)"
        let playground = environment == .playground ? ".playground" : ""
        return "https://\(prefix)\(playground).klarna.com"
    }

    public static func networkBaseURL(environment: Environment) -> String {
        environment == .playground ? "https://api-global.test.klarna.com" : "https://api-global.klarna.com"
    }

    public var description: String {
        "KlarnaConfiguration(baseURL: \(baseURL), networkBaseURL: \(networkBaseURL), username: \(credentials.username))"
    }

    private static func trimmed(_ url: String) -> String {
        var url = url
        while url.hasSuffix("/") { url.removeLast() }
        return url
    }
}

public enum ProductInfo {
    public static let name = "klarna-reconciler"
    /// The package version follows it (`make deb`).
    public static let version = "0.2.0"
    /// The git commit the binary was built from; "unknown" when built without `make`.
    public static let commit = String(cString: klarna_reconciler_commit())
}
