import Foundation

/// Several merchants: Klarna keeps every resource, payout and rate limit per merchant id, and a merchant's call on
/// another merchant's resource is answered as if it did not exist.
extension SandboxState {
    /// The merchant id owning the resource `route` names; `nil` for a route naming none (lists, settlements, which
    /// show the caller's own) or a resource that does not exist (its handler answers that).
    func owner(of route: KlarnaRoute) -> String? {
        let id = route.parameters.first ?? ""
        switch route.name {
        case "hpp.read_session", "hpp.disable_session": return hostedSessions[id]?.merchant
        case "kp.read_session": return paymentSessions[id]?.merchant
        case "kp.create_order", "kp.cancel_authorization", "kp.create_customer_token": return tokens[id].flatMap { paymentSessions[$0]?.merchant }
        case let name where name.hasPrefix("om."): return orders[id]?.merchant
        case let name where name.hasPrefix("ct."): return customerTokens[id]?.merchant
        case "kn.read_payment_request": return paymentRequests[id]?.merchant
        case "disputes.read", "disputes.accept_loss", "disputes.add_attachment", "disputes.represent", "disputes.appeal":
            return disputes[id]?.merchant
        default: return nil
        }
    }
}

extension KlarnaAPIHandlers {
    /// What `route`'s handler answers when the resource it names does not exist (for each route ``SandboxState/owner(of:)``
    /// finds an owner for).
    static func notFound(_ route: KlarnaRoute) -> SandboxResponse {
        let id = route.parameters.first ?? ""
        switch route.name {
        case let name where name.hasPrefix("hpp."): return hppNotFound
        case "kp.read_session": return kpNotFound
        case let name where name.hasPrefix("kp."): return invalidToken.response
        case let name where name.hasPrefix("om."): return noSuchOrder
        case let name where name.hasPrefix("ct."): return CustomerTokenHandlers.notFound
        case "kn.read_payment_request": return paymentRequestNotFound
        default: return DisputeHandlers.answer(SandboxState.noSuchDispute(id))
        }
    }
}

extension KlarnaSandbox {
    /// The merchant id a control names, the primary merchant's when it names none; a 400 for one the sandbox does not
    /// serve.
    func merchantID(_ given: String?) throws -> String {
        guard let given else { return merchantIDs[0] }
        guard merchantIDs.contains(given) else {
            throw ControlError(status: 400, description: "merchant must be one of \(merchantIDs.joined(separator: ", ")), not \(given)")
        }
        return given
    }
}
