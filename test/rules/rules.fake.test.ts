import { fakeTarget } from '../helpers/kube-target.ts';
import { ruleScenarios } from './rule-scenarios.ts';

ruleScenarios('fake API server', () => fakeTarget());
