import Foundation
import ReconcilerCore

/// Klarna's Settlements API v1: payouts, their summary and their transactions, read-only. A
/// settlement schedule catches up first, so a read sees every payout due by now on the sandbox clock. A merchant sees
/// its own payouts only.
enum SettlementHandlers {
    static func handle(_ route: KlarnaRoute, _ context: KlarnaCallContext, _ state: inout SandboxState) throws(Rejection) -> SandboxResponse {
        state.catchUpSettlements(now: context.now)
        let base = "http://\(context.request.header("Host") ?? "localhost")/settlements/v1"
        switch route.name {
        case "settlements.list_payouts": return try listPayouts(context, state, base: base)
        case "settlements.read_payout": return try readPayout(route.parameters.first ?? "", context, state, base: base)
        case "settlements.payout_summary": return try payoutSummary(context, state)
        case "settlements.list_transactions": return try listTransactions(context, state, base: base)
        default: throw Rejection(404, "NOT_FOUND", "No such resource")
        }
    }

    struct PayoutBody: Encodable {
        let totals: SandboxSettlementTotals
        let paymentReference: String
        let payoutDate: Date
        let currencyCode: String
        let merchantSettlementType: String
        let merchantId: String
        let currencyCodeOfRegistrationCountry: String
        /// Where the payout's transactions are listed.
        let transactions: String

        init(_ payout: CreatedPayout, base: String) {
            totals = payout.totals
            paymentReference = payout.paymentReference
            payoutDate = payout.payoutDate
            currencyCode = payout.currencyCode
            merchantSettlementType = SettlementLedger.settlementType
            merchantId = payout.merchantId
            currencyCodeOfRegistrationCountry = SettlementLedger.registrationCurrency
            transactions = base + "/transactions?payment_reference=" + Page.escape(payout.paymentReference)
        }
    }

    struct Pagination: Encodable {
        let count: Int
        let total: Int
        let offset: Int
        let next: String?
        let prev: String?
    }

    /// The caller's payouts in Klarna's list order: by payout date, then payment reference.
    static func payouts(_ context: KlarnaCallContext, _ state: SandboxState) -> [CreatedPayout] {
        state.settlements.payouts.filter { $0.merchantId == context.merchant }
            .sorted { ($0.payoutDate, $0.paymentReference) < ($1.payoutDate, $1.paymentReference) }
    }

    static func listPayouts(_ context: KlarnaCallContext, _ state: SandboxState, base: String) throws(Rejection) -> SandboxResponse {
        let query = context.request.query
        let start = try date(query, "start_date")
        let end = try date(query, "end_date")
        let currency = query["currency_code"]?.uppercased()
        let page = try Page(query)
        let matching = payouts(context, state).filter { payout in
            if let start, payout.payoutDate < start { return false }
            if let end, payout.payoutDate > end { return false }
            if let currency, payout.currencyCode.uppercased() != currency { return false }
            return true
        }
        let shown = page.slice(matching)
        struct Body: Encodable {
            let payouts: [PayoutBody]
            let pagination: Pagination
        }
        return .json(
            200,
            Body(
                payouts: shown.map { PayoutBody($0, base: base) },
                pagination: page.pagination(
                    count: shown.count, total: matching.count, url: base + "/payouts",
                    filters: ["start_date", "end_date", "currency_code"], from: query)))
    }

    static func readPayout(
        _ reference: String, _ context: KlarnaCallContext, _ state: SandboxState, base: String
    ) throws(Rejection) -> SandboxResponse {
        guard let payout = state.settlements.payouts.first(where: { $0.paymentReference == reference && $0.merchantId == context.merchant })
        else {
            throw Rejection(404, "NOT_FOUND", "No payout with payment reference \(reference)")
        }
        return .json(200, PayoutBody(payout, base: base))
    }

    struct SummaryBody: Encodable {
        let summaryPayoutDateStart: Date
        let summaryPayoutDateEnd: Date
        let summarySettlementCurrency: String
        let summaryTotalSaleAmount: Int
        let summaryTotalReturnAmount: Int
        let summaryTotalReversalAmount: Int
        let summaryTotalFeeAmount: Int
        let summaryTotalFeeCorrectionAmount: Int
        let summaryTotalTaxAmount: Int
        let summaryTotalCommissionAmount: Int
        let summaryTotalHoldbackAmount: Int
        let summaryTotalReleaseAmount: Int
        let summaryTotalRepayAmount: Int
        let summaryTotalSettlementAmount: Int
    }

    /// One summary per currency of the payouts dated within `start_date`…`end_date` (both required), the period
    /// being the one asked for.
    static func payoutSummary(_ context: KlarnaCallContext, _ state: SandboxState) throws(Rejection) -> SandboxResponse {
        let query = context.request.query
        guard let start = try date(query, "start_date"), let end = try date(query, "end_date") else {
            throw Rejection(400, "BAD_VALUE", "start_date and end_date are required")
        }
        let currency = query["currency_code"]?.uppercased()
        let matching = payouts(context, state).filter { payout in
            if let currency, payout.currencyCode.uppercased() != currency { return false }
            return payout.payoutDate >= start && payout.payoutDate <= end
        }
        let byCurrency = Dictionary(grouping: matching, by: \.currencyCode)
        let summaries = byCurrency.keys.sorted().map { code -> SummaryBody in
            let group = byCurrency[code] ?? []
            // Held at Int's limits rather than trap, as a payout's own totals are.
            func sum(_ total: KeyPath<SandboxSettlementTotals, Int>) -> Int {
                group.reduce(0) { $0.addingSaturated($1.totals[keyPath: total]) }
            }
            return SummaryBody(
                summaryPayoutDateStart: start, summaryPayoutDateEnd: end, summarySettlementCurrency: code,
                summaryTotalSaleAmount: sum(\.saleAmount), summaryTotalReturnAmount: sum(\.returnAmount),
                summaryTotalReversalAmount: sum(\.reversalAmount), summaryTotalFeeAmount: sum(\.feeAmount),
                summaryTotalFeeCorrectionAmount: sum(\.feeCorrectionAmount), summaryTotalTaxAmount: sum(\.taxAmount),
                summaryTotalCommissionAmount: sum(\.commissionAmount), summaryTotalHoldbackAmount: sum(\.holdbackAmount),
                summaryTotalReleaseAmount: sum(\.releaseAmount), summaryTotalRepayAmount: sum(\.repayAmount),
                summaryTotalSettlementAmount: sum(\.settlementAmount))
        }
        return .json(200, summaries)
    }

    /// Transactions of every payout in list order, each payout's in its own order; no date filter, as Klarna's.
    static func listTransactions(_ context: KlarnaCallContext, _ state: SandboxState, base: String) throws(Rejection) -> SandboxResponse {
        let query = context.request.query
        let reference = query["payment_reference"]
        let order = query["order_id"]
        let page = try Page(query)
        let matching = payouts(context, state).filter { reference == nil || $0.paymentReference == reference }
            .flatMap(\.transactions)
            .filter { order == nil || $0.orderId == order }
        let shown = page.slice(matching)
        struct Body: Encodable {
            let transactions: [SandboxSettlementTransaction]
            let pagination: Pagination
        }
        return .json(
            200,
            Body(
                transactions: shown,
                pagination: page.pagination(
                    count: shown.count, total: matching.count, url: base + "/transactions",
                    filters: ["payment_reference", "order_id"], from: query)))
    }

    /// An ISO 8601 date-time query parameter; a bare date means its midnight UTC (Klarna's Settlements API reference). Read as the
    /// CLI's `--since` is (``PayoutSince``), so a day that does not exist (`2026-02-30`) is refused, not rolled over.
    static func date(_ query: [String: String], _ name: String) throws(Rejection) -> Date? {
        guard let text = query[name] else { return nil }
        guard let date = PayoutSince.parse(text) else {
            throw Rejection(400, "BAD_VALUE", "\(name) must be \(PayoutSince.expected), not \(text)")
        }
        return date
    }

    /// `size` (default 20, at most 500) and `offset` (default 0), and the `next`/`prev` links that keep the filters.
    struct Page {
        let size: Int
        let offset: Int

        init(_ query: [String: String]) throws(Rejection) {
            size = try Self.number(query, "size", default: 20, in: 1...500)
            offset = try Self.number(query, "offset", default: 0, in: 0...Int.max)
        }

        func slice<Item>(_ items: [Item]) -> [Item] { Array(items.dropFirst(offset).prefix(size)) }

        func pagination(count: Int, total: Int, url: String, filters: [String], from query: [String: String]) -> Pagination {
            func link(_ offset: Int) -> String {
                var parameters: [String] = []
                for name in filters { if let value = query[name] { parameters.append(name + "=" + Self.escape(value)) } }
                parameters += ["offset=\(offset)", "size=\(size)"]
                return url + "?" + parameters.joined(separator: "&")
            }
            return Pagination(
                count: count, total: total, offset: offset, next: offset + count < total ? link(offset + size) : nil,
                prev: offset > 0 ? link(max(0, offset - size)) : nil)
        }

        private static func number(_ query: [String: String], _ name: String, default value: Int, in range: ClosedRange<Int>) throws(Rejection) -> Int
        {
            guard let text = query[name] else { return value }
            guard let number = Int(text), range.contains(number) else {
                let bounds = range.upperBound == .max ? "at least \(range.lowerBound)" : "from \(range.lowerBound) to \(range.upperBound)"
                throw Rejection(400, "BAD_VALUE", "\(name) must be an integer \(bounds), not \(text)")
            }
            return number
        }

        /// Percent-encodes all but RFC 3986's unreserved characters (a `+` in a time zone must not read as a space).
        /// `KlarnaClient.queryString` encodes the same way; the sandbox does not depend on KlarnaAPI, so it has its own.
        static func escape(_ value: String) -> String {
            let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
            return value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? value
        }
    }
}
