/// What a failed Klarna call's answer says, read once from its HTTP status; every rule about what follows a failure
/// asks this, so no status code is compared outside this file and the client's error mapping.
public enum KlarnaAnswer: Sendable, Equatable {
    /// 404: Klarna does not know what the call named. It never existed for this account, or Klarna deleted it (an
    /// expired HPP session or payment request). Asking again gets the same.
    case unknownResource
    /// 400: Klarna refused the request as malformed or not allowed for this resource.
    case badRequest
    /// 401: the account's credentials.
    case unauthorized
    /// 403: the account may not do this.
    case forbidden
    /// 409: the request conflicts with the resource's state.
    case conflict
    /// 429: too many requests for the account.
    case tooManyRequests
    /// Any other 4xx except 408 and 425: refused, and sending it again gets the same.
    case otherRefusal(status: Int)
    /// No clear answer: no status (a reset, a timeout, an undecodable body), 408, 425, a 5xx. Trying again may get
    /// another answer.
    case unclear

    public init(status: Int?) {
        switch status {
        case 404: self = .unknownResource
        case 400: self = .badRequest
        case 401: self = .unauthorized
        case 403: self = .forbidden
        case 409: self = .conflict
        case 429: self = .tooManyRequests
        case .some(let status) where (400..<500).contains(status) && status != 408 && status != 425: self = .otherRefusal(status: status)
        default: self = .unclear
        }
    }

    /// A read of something the daemon tracks (a session, an order, a payment request, a customer token) that Klarna
    /// answers this way ends that tracking: reading again would get the same, so the caller ends it (needs attention,
    /// expired, or the charge failed) instead of trying again. Every other failure of a read is tried again.
    public var endsWhatWasRead: Bool { self == .unknownResource }

    /// Whether the failure tells anything about Klarna's health: a 404 is an answer about one resource, not a fault.
    public var isKlarnaFault: Bool { self != .unknownResource }

    /// A 429 pauses every caller of the account until the reset Klarna named.
    public var pausesTheAccount: Bool { self == .tooManyRequests }

    /// Only this one resource is refused (unknown or a bad request): the other resources of a sync go on without it.
    public var refusesThisResourceOnly: Bool { self == .unknownResource || self == .badRequest }

    /// A refusal that concerns the whole account (credentials, permissions, rate): a sync stops and is tried again.
    public var concernsTheAccount: Bool { self == .unauthorized || self == .forbidden || self == .tooManyRequests }

    /// Order Management does not know the order or will not show it (a settlement's order of another account, or
    /// one Klarna deleted): what the settlement line says stands.
    public var hidesTheOrder: Bool { self == .unknownResource || self == .forbidden }

    /// A call that changes something refused as such (any 4xx but 408, 409, 425, 429): sending it again gets the same.
    public var refusesTheAction: Bool {
        switch self {
        case .unknownResource, .badRequest, .unauthorized, .forbidden, .otherRefusal: true
        case .conflict, .tooManyRequests, .unclear: false
        }
    }
}
