/// The bells of the accounts' dispute services: a dispute webhook rings its account's service, an operator's action
/// every service (the store knows the dispute's account; the one whose it is finds the action due).
public struct DisputeBells: Sendable {
    private let bells: [AccountID: Doorbell]

    public init(_ bells: [AccountID: Doorbell] = [:]) { self.bells = bells }

    public func ring(_ account: AccountID) { bells[account]?.ring() }

    public func ringAll() { bells.values.forEach { $0.ring() } }
}
