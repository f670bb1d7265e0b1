import Foundation

/// How the sandbox shapes its successful answers to the Klarna calls the daemon makes, set with
/// ``KlarnaSandbox/setResponseShape(_:)`` or `POST /_sandbox/response-shape {"shape": "minimal"}`:
///
/// - `normal`: as the sandbox always answers.
/// - `minimal`: only the fields Klarna's specs require (`required` in Klarna's OpenAPI specs and its Settlements API reference). HPP's
///   SessionResponseV1, KP's session_read and OM's MerchantOrderDto require none at all, and an empty document
///   leaves nothing to act on; those keep only the state they exist to report: the HPP status with the token or
///   order id a `COMPLETED` hands over, the order data KP's `session_create` requires (create-order requires it
///   again), and the order's status, fraud status, captured and remaining amounts. A capture's `201` loses its
///   `Capture-Id` and `Location` headers, which the spec does not mark required, and a collection's `pagination`
///   keeps only `count`. The optional settlement amounts the payout formula adds up (`tax_amount`,
///   `fee_correction_amount`, a row's `vat_amount`) go only when they are 0: leaving out one that is not would
///   describe another payout, not the same one in fewer words.
/// - `maximal`: every field the specs document, fields no spec names (`sandbox_unknown_*`), and values no spec's
///   enum lists where a value is not what drives the payment (an HPP status that is not final, a payment method,
///   an acquiring channel, a shipping method, a payment request's state reason).
///
/// Error answers and routes the daemon does not call are never reshaped.
public enum SandboxResponseShape: String, Codable, Sendable {
    case normal, minimal, maximal

    /// `response` of the call `route` as this shape has it.
    func shape(_ response: SandboxResponse, route: String) -> SandboxResponse {
        guard self != .normal, (200..<300).contains(response.status) else { return response }
        if route == "om.create_capture" { return shapeCreated(response) }
        guard let rule = Self.rules[route], let document = try? JSONDecoder().decode(ShapeJSON.self, from: Data(response.body)),
            let body = try? Self.encoder.encode(self == .minimal ? rule.minimal(document) : rule.maximal(document))
        else { return response }
        var shaped = response
        shaped.body = Array(body)
        return shaped
    }

    /// OM's `201` to a capture: no body is defined, the id is in headers the spec does not mark required.
    private func shapeCreated(_ response: SandboxResponse) -> SandboxResponse {
        var shaped = response
        if self == .minimal {
            shaped.headers = response.headers.filter { !["capture-id", "location"].contains($0.name.lowercased()) }
        } else {
            shaped.headers += [("Klarna-Sandbox-Unknown-Header", "not in any spec"), ("Content-Type", "application/json")]
            shaped.body = Array(#"{"sandbox_unknown_field":"a body the spec does not define"}"#.utf8)
        }
        return shaped
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// What `minimal` and `maximal` make of one route's JSON answer.
    private struct Rule: Sendable {
        let minimal: @Sendable (ShapeJSON) -> ShapeJSON
        let maximal: @Sendable (ShapeJSON) -> ShapeJSON
    }

    private static let rules: [String: Rule] = [
        "hpp.read_session": Rule(
            minimal: { $0.keeping("status", "authorization_token", "order_id") },
            maximal: { hpp in
                var hpp = hpp.adding(Documented.hppSession)
                // Not final, so the payment goes on: a status Klarna's enum does not list (Klarna may add HPP statuses).
                if let status = hpp["status"]?.string, !["COMPLETED", "CANCELLED", "DISABLED"].contains(status) {
                    hpp["status"] = "SANDBOX_UNKNOWN_STATUS"
                }
                return hpp
            }),
        "kp.read_session": Rule(
            minimal: { kp in
                var kp = kp.keeping("purchase_country", "purchase_currency", "order_amount", "order_lines")
                kp["order_lines"] = kp["order_lines"]?.eachElement { $0.keeping(Required.orderLine) }
                return kp
            },
            maximal: { kp in
                var kp = kp.adding(Documented.paymentSession)
                kp["order_lines"] = kp["order_lines"]?.eachElement { $0.adding(Documented.orderLine) }
                return kp
            }),
        "kp.create_order": Rule(
            minimal: { $0.keeping("order_id") },
            maximal: { created in
                var created = created.adding(Documented.unknown)
                created["authorized_payment_method"] = [
                    "type": "sandbox_unknown_method", "number_of_days": 14, "number_of_installments": 3,
                    "sandbox_unknown_field": true,
                ]
                return created
            }),
        "kp.create_customer_token": Rule(
            minimal: { $0.keeping("token_id") },
            maximal: { $0.adding(Documented.customerToken) }),
        "om.read_order": Rule(
            minimal: { $0.keeping("status", "fraud_status", "captured_amount", "remaining_authorized_amount") },
            maximal: { order in
                var order = order.adding(Documented.order)
                if order["order_lines"] == nil, let amount = order["order_amount"] {
                    order["order_lines"] = [["name": "Sandbox item", "quantity": 1, "unit_price": amount, "total_amount": amount]]
                }
                order["captures"] = order["captures"]?.eachElement { $0.adding(Documented.capture) }
                order["refunds"] = order["refunds"]?.eachElement { $0.adding(Documented.refund) }
                return order
            }),
        "kn.read_payment_request": Rule(
            minimal: { $0.keeping("state", "state_context") },
            maximal: { $0.adding(Documented.paymentRequest) }),
        "settlements.list_payouts": Rule(
            minimal: { page in
                var page = page.keeping("payouts", "pagination")
                page["payouts"] = page["payouts"]?.eachElement(Required.payout)
                page["pagination"] = page["pagination"]?.keeping("count")
                return page
            },
            maximal: { page in
                var page = page.adding(Documented.unknown)
                page["payouts"] = page["payouts"]?.eachElement { $0.adding(Documented.unknown) }
                return page
            }),
        "settlements.read_payout": Rule(minimal: Required.payout, maximal: { $0.adding(Documented.unknown) }),
        "settlements.payout_summary": Rule(minimal: { $0 }, maximal: { $0.eachElement { $0.adding(Documented.unknown) } }),
        "settlements.list_transactions": Rule(
            minimal: { page in
                var page = page.keeping("transactions", "pagination")
                page["transactions"] = page["transactions"]?.eachElement { $0.keeping(Required.transaction, unlessZero: "vat_amount") }
                page["pagination"] = page["pagination"]?.keeping("count")
                return page
            },
            maximal: { page in
                var page = page.adding(Documented.unknown)
                page["transactions"] = page["transactions"]?.eachElement { $0.adding(Documented.transaction) }
                return page
            }),
    ]

    /// The `required` lists of the schemas whose minimal shape is not a single list of top-level keys.
    private enum Required {
        static let orderLine: Set<String> = ["name", "quantity", "total_amount", "unit_price"]
        static let transaction: Set<String> = [
            "amount", "sale_date", "type", "capture_date", "order_id", "currency_code", "purchase_country",
        ]

        /// A payout with all but `currency_code_of_registration_country` and `transactions`, and its totals with all
        /// but `tax_amount` and `fee_correction_amount` (when 0).
        static func payout(_ payout: ShapeJSON) -> ShapeJSON {
            var payout = payout.keeping(
                "totals", "payment_reference", "payout_date", "currency_code", "merchant_settlement_type", "merchant_id")
            payout["totals"] = payout["totals"]?.droppingZero("tax_amount", "fee_correction_amount")
            return payout
        }
    }

    /// Fields the specs document that the sandbox does not otherwise send, with made-up values, and fields no spec
    /// names. Added only where the answer does not have them.
    private enum Documented {
        static let unknown: [String: ShapeJSON] = [
            "sandbox_unknown_field": "not in any spec",
            "sandbox_unknown_object": ["nested": [1, "two", true, nil], "empty": [:]],
        ]

        static let address: ShapeJSON = [
            "attention": "Reception", "city": "Stockholm", "country": "SE", "email": "customer@example.com",
            "family_name": "Andersson", "given_name": "Testperson", "organization_name": "Sandbox AB",
            "phone": "+46701234567", "postal_code": "12345", "region": "AB", "street_address": "Sveavägen 46",
            "street_address2": "Floor 3", "title": "Mx", "sandbox_unknown_field": "in an address",
        ]

        static let hppSession = unknown.merging([
            "customer": [
                "date_of_birth": "1987-08-15", "family_name": "Andersson", "given_name": "Testperson",
                "national_identification_number": "19870815-8493", "title": "Mx",
            ],
            "manual_identification": [
                "challenge": "A78", "customer": ["given_name": "Testperson"], "customer_obfuscated": ["given_name": "T*******"],
                "expires_at": "2038-01-19T03:14:07.000Z",
            ],
        ]) { $1 }

        static let paymentSession = unknown.merging([
            "acquiring_channel": "SANDBOX_UNKNOWN_CHANNEL",
            "attachment": ["body": #"{"customer_account_info":[]}"#, "content_type": "application/vnd.klarna.internal.emd-v2+json"],
            "billing_address": address, "shipping_address": address,
            "client_token": "eyJhbGciOiJIUzI1NiJ9.sandbox",
            "custom_payment_method_ids": ["sandbox-promo-0"],
            "customer": [
                "date_of_birth": "1987-08-15", "gender": "female", "organization_entity_type": "SANDBOX_UNKNOWN_ENTITY",
                "organization_registration_id": "556036-0793", "title": "Mx", "type": "person", "vat_id": "SE556036079301",
            ],
            "design": "sandbox",
            "merchant_data": #"{"order_specific":[]}"#,
            "merchant_reference2": "sandbox-ref-2",
            "merchant_urls": [
                "confirmation": "https://shop.example/confirmation", "notification": "https://shop.example/notification",
                "push": "https://shop.example/push", "authorization": "https://shop.example/authorization",
            ],
            "options": [
                "color_border": "#FF0000", "color_border_selected": "#00FF00", "color_details": "#0000FF",
                "color_text": "#000000", "radius_border": "5px",
            ],
            "payment_method_categories": [
                [
                    "identifier": "sandbox_unknown_category", "name": "Pay in the sandbox",
                    "asset_urls": ["descriptive": "https://x.klarnacdn.net/d.svg", "standard": "https://x.klarnacdn.net/s.svg"],
                ]
            ],
        ]) { $1 }

        static let orderLine: [String: ShapeJSON] = [
            "type": "physical", "reference": "SKU-1", "quantity_unit": "pcs", "total_discount_amount": 0,
            "merchant_data": "line data", "product_url": "https://shop.example/p/1", "image_url": "https://shop.example/p/1.png",
            "product_identifiers": [
                "brand": "Sandbox", "category_path": "Things > Sandbox", "global_trade_item_number": "735000000000",
                "manufacturer_part_number": "SBX-1", "color": "red", "size": "M",
            ],
            "subscription": ["name": "Sandbox box", "interval": "SANDBOX_UNKNOWN_INTERVAL", "interval_count": 1],
            "sandbox_unknown_field": "in an order line",
        ]

        static let customerToken = unknown.merging([
            "billing_address": address, "customer": ["date_of_birth": "1987-08-15", "gender": "female"],
            "payment_method_reference": "0b1d9815-165e-42e2-8867-35bc03789e00",
            "redirect_url": "https://credit.klarna.com/v1/sessions/sandbox/redirect",
        ]) { $1 }

        static let shippingInfo: ShapeJSON = [
            [
                "shipping_company": "Sandbox Post", "shipping_method": "SandboxUnknownMethod", "tracking_number": "SB123",
                "tracking_uri": "https://track.example/SB123", "return_shipping_company": "Sandbox Post",
                "return_tracking_number": "SB124", "return_tracking_uri": "https://track.example/SB124",
            ]
        ]

        static let order = unknown.merging([
            "billing_address": address, "shipping_address": address,
            "customer": ["date_of_birth": "1987-08-15", "national_identification_number": "19870815-8493"],
            "initial_payment_method": ["type": "SANDBOX_UNKNOWN_METHOD", "description": "Pay later", "number_of_installments": 1],
            "locale": "sv-SE", "merchant_data": "order data", "merchant_reference2": "sandbox-ref-2", "purchase_country": "SE",
            "selected_shipping_option": [
                "id": "express", "name": "Express", "price": 0, "tax_amount": 0, "tax_rate": 0,
                "shipping_method": "SandboxUnknownMethod",
            ],
            "shipping_info": shippingInfo,
        ]) { $1 }

        static let capture: [String: ShapeJSON] = [
            "billing_address": address, "shipping_address": address, "description": "Shipped",
            "klarna_reference": "K4MADNY-1", "refunded_amount": 0, "order_lines": [], "shipping_info": shippingInfo,
            "sandbox_unknown_field": "in a capture",
        ]

        static let refund: [String: ShapeJSON] = [
            "credit_invoice": false, "description": "Returned", "order_lines": [], "sandbox_unknown_field": "in a refund",
        ]

        static let paymentRequest = unknown.merging([
            "state_reason": "SANDBOX_UNKNOWN_REASON", "state_expires_at": "2038-01-19T03:14:07.000Z",
            "payment_request": ["currency": "SEK", "amount": 10_000, "payment_request_reference": "sandbox"],
        ]) { $1 }

        static let transaction = unknown.merging([
            "short_order_id": "K4MADNY", "payout": "https://api.klarna.com/settlements/v1/payouts/SANDBOX",
            "merchant_reference2": "sandbox-ref-2", "shipping_country": "SE",
            "tax_in_currency_of_registration_country": 0, "currency_code_of_registration_country": "SEK",
            "initial_payment_method_type": "sandbox_unknown_method", "initial_number_of_installments": 1,
            "initial_payment_method_monthly_downpayments": 0, "klarna_comment": "sandbox",
        ]) { $1 }
    }
}

extension KlarnaSandbox {
    /// Shapes the answers to the calls the daemon makes from now on (``SandboxResponseShape``); `reset()` makes them
    /// `normal` again.
    public func setResponseShape(_ shape: SandboxResponseShape) {
        state.withLock { $0.responseShape = shape }
    }

    public var responseShape: SandboxResponseShape { state.withLock { $0.responseShape } }
}

/// A JSON document as the shaping reads and rewrites it.
private enum ShapeJSON: Codable, Equatable, Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByNilLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case array([ShapeJSON])
    case object([String: ShapeJSON])

    init(stringLiteral value: String) { self = .string(value) }
    init(integerLiteral value: Int) { self = .int(value) }
    init(booleanLiteral value: Bool) { self = .bool(value) }
    init(nilLiteral: ()) { self = .null }
    init(arrayLiteral elements: ShapeJSON...) { self = .array(elements) }
    init(dictionaryLiteral elements: (String, ShapeJSON)...) { self = .object(Dictionary(elements) { $1 }) }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([ShapeJSON].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: ShapeJSON].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// A member of an object; setting one on anything else changes nothing.
    subscript(key: String) -> ShapeJSON? {
        get {
            if case .object(let object) = self { return object[key] }
            return nil
        }
        set {
            guard case .object(var object) = self else { return }
            object[key] = newValue
            self = .object(object)
        }
    }

    /// An object with only `keys`; anything else as it is.
    func keeping(_ keys: Set<String>) -> ShapeJSON {
        guard case .object(let object) = self else { return self }
        return .object(object.filter { keys.contains($0.key) })
    }

    func keeping(_ keys: String...) -> ShapeJSON { keeping(Set(keys)) }

    /// An object with only `keys`, and `optional` where it is not 0; anything else as it is.
    func keeping(_ keys: Set<String>, unlessZero optional: String) -> ShapeJSON {
        guard case .object(let object) = self else { return self }
        return .object(object.filter { keys.contains($0.key) || ($0.key == optional && $0.value != .int(0)) })
    }

    /// An object without those of `keys` that are 0; anything else as it is.
    func droppingZero(_ keys: String...) -> ShapeJSON {
        guard case .object(let object) = self else { return self }
        return .object(object.filter { !keys.contains($0.key) || $0.value != .int(0) })
    }

    /// An object with `fields` it did not have; anything else as it is.
    func adding(_ fields: [String: ShapeJSON]) -> ShapeJSON {
        guard case .object(let object) = self else { return self }
        return .object(object.merging(fields) { own, _ in own })
    }

    /// An array with `transform` applied to each element; anything else as it is.
    func eachElement(_ transform: (ShapeJSON) -> ShapeJSON) -> ShapeJSON {
        guard case .array(let elements) = self else { return self }
        return .array(elements.map(transform))
    }
}
